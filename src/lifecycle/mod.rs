//! The node lifecycle controller. Its decisions are [`nlc_core::lifecycle`]; here are its
//! flags and what they turn into.

pub mod args;
pub mod metrics;

pub use args::{Config, LifecycleArgs};
