//! rankvisor: PID 1 and replica supervisor for distributed PyTorch training jobs.

pub mod dryrun;
pub mod duration;
pub mod report;
