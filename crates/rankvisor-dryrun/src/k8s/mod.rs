//! Kubernetes' own object types, shared by every job kind's admission and controllers.
//!
//! `raw` (metadata, containers, env, resources as written), `quantity` (resource quantities and the
//! queue's capability), `container` (a container as the dry run runs it), `field_error` (the
//! apiserver's and webhooks' field errors, DNS-1035 names), `document` (a file's documents and
//! [`ManifestError`](document::ManifestError)).

pub(crate) mod container;
pub(crate) mod document;
pub(crate) mod field_error;
pub(crate) mod quantity;
pub(crate) mod raw;
