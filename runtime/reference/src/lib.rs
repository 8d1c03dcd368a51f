//! tern-reference
