//! The node lifecycle controller. Its decisions are [`nlc_core::lifecycle`]; here are its
//! flags and what they turn into.

pub(crate) mod args;
pub(crate) mod metrics;

pub(crate) use args::{Config, LifecycleArgs};
