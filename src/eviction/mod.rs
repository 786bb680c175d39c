//! The taint eviction controller. Its decisions are [`nlc_core::eviction`]; here are its flags
//! and what they turn into.

pub mod args;
pub mod metrics;

pub use args::{Config, EvictionArgs, EvictionEvents, NodeReadMode, Pacing};
