//! Command (pure data) -> Plan (everything allocated in the parent) -> Child.

pub(crate) mod command;
pub(crate) mod engine;
pub(crate) mod handle;
pub(crate) mod limits;
pub(crate) mod options;
pub(crate) mod plan;
pub(crate) mod wire;
