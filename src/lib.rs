//! rankvisor: PID 1 and replica supervisor for distributed PyTorch training jobs.

pub mod duration;
pub mod health;
pub mod report;
