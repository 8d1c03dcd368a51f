//! tern-engine
