//! What the dry run shows: the rows a `kubectl get -w` watch prints ([`rows`], every job kind's
//! objects), their text and JSON rendering ([`kubectl`]), and the `--timeline` drawing of a run
//! ([`timeline`]). Pure: the event loop prints what these return.

pub(crate) mod kubectl;
pub(crate) mod rows;
pub(crate) mod timeline;
