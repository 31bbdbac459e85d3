//! Join policies and time-group identity.

pub mod identity;
pub mod policy;
