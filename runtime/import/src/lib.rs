//! tern-import
