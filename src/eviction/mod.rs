//! The taint eviction controller. Its decisions are [`nlc_core::eviction`]; here are its flags
//! and what they turn into.

pub(crate) mod args;
pub(crate) mod metrics;

pub(crate) use args::{Config, EvictionArgs, EvictionEvents, NodeReadMode, Pacing};
