//! Volcano, the gang scheduler a PyTorchJob's pods go through, as a shared layer any controller
//! that makes a PodGroup uses: its gang admission ([`gang`]). The PodGroup's row is in
//! [`crate::render::rows`]; the queue capability it compares to is a [`crate::k8s::quantity`].

pub(crate) mod gang;
