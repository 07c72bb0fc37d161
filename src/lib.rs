//! rankvisor: PID 1 and replica supervisor for distributed PyTorch training jobs.

pub mod duration;
pub mod rendezvous;
pub mod report;
