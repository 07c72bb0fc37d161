//! The agent's HTTP edge: routes the operator's requests, validates bodies (`api`), hands orders
//! to the event loop and waits for its step, and serves `/status` from the loop's latest view.
//! The connection handling is the probes' (`http::serve_with`).

use super::api::{self, StatusView};
use super::{Order, Request};
use crate::http::{read_body, BodyError};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{header, Method, StatusCode};
use std::future::Future;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

/// The largest request body taken: an assignment with its log rules is a few KiB.
pub const MAX_BODY: usize = 1024 * 1024;

/// What the handlers share: the way to the loop and its latest view.
#[derive(Debug, Clone)]
pub struct AgentHttp {
    /// Orders to the event loop.
    pub orders: mpsc::UnboundedSender<Request>,
    /// The loop's latest `/status` view.
    pub status: watch::Receiver<StatusView>,
}

/// One reply, before it becomes HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: StatusCode,
    /// The body (JSON, or empty).
    pub body: String,
}

fn reply(status: StatusCode, body: impl Into<String>) -> Reply {
    Reply { status, body: body.into() }
}

impl AgentHttp {
    /// The reply to `method path` with `body`.
    pub async fn handle(&self, method: &Method, path: &str, body: Result<Bytes, BodyError>) -> Reply {
        let known = ["/status", "/start", "/stop", "/update", "/shutdown"];
        if !known.contains(&path) {
            return reply(StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#);
        }
        let wanted = if path == "/status" { Method::GET } else { Method::POST };
        if *method != wanted && !(path == "/status" && *method == Method::HEAD) {
            return reply(StatusCode::METHOD_NOT_ALLOWED, r#"{"detail":"Method Not Allowed"}"#);
        }
        if path == "/status" {
            return reply(StatusCode::OK, api::status_body(&self.status.borrow()));
        }
        let body = match body {
            Ok(b) => b,
            Err(e) => return reply(e.status, serde_json::json!({ "detail": e.detail }).to_string()),
        };
        let order = match path {
            "/start" | "/update" => {
                // Compiling the attempt's log rules may take a while: off the runtime's one
                // thread, so `/status`, the probes and the event loop go on meanwhile.
                let parsed = tokio::task::spawn_blocking(move || api::parse_assignment(&body)).await;
                let Ok(parsed) = parsed else {
                    return reply(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        r#"{"detail":"the request could not be checked"}"#,
                    );
                };
                parsed.map(if path == "/start" { Order::Start } else { Order::Update })
            }
            "/stop" => api::parse_stop(&body).map(Order::Stop),
            _ => Ok(Order::Shutdown),
        };
        let order = match order {
            Ok(o) => o,
            Err(invalid) => {
                let summary = invalid.summary();
                let body = crate::untrusted::escape(&summary);
                tracing::warn!("agent: {path} refused (422): {body}");
                return reply(StatusCode::UNPROCESSABLE_ENTITY, invalid.body());
            }
        };
        let (done, taken) = oneshot::channel();
        if self.orders.send(Request { order, done }).is_err() || taken.await.is_err() {
            return reply(StatusCode::SERVICE_UNAVAILABLE, r#"{"detail":"rankvisor is exiting"}"#);
        }
        match path {
            // `/update` answers with the status, as the agent does.
            "/update" => reply(StatusCode::OK, api::status_body(&self.status.borrow())),
            _ => reply(StatusCode::OK, ""),
        }
    }
}

async fn respond(state: AgentHttp, req: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = read_body(body, MAX_BODY).await;
    let r = state.handle(&parts.method, parts.uri.path(), body).await;
    let mut resp = hyper::Response::new(Full::new(Bytes::from(r.body)));
    *resp.status_mut() = r.status;
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    if r.status == StatusCode::METHOD_NOT_ALLOWED {
        let allow = if parts.uri.path() == "/status" { "GET, HEAD" } else { "POST" };
        resp.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static(allow));
    }
    resp
}

/// Serve the agent's API on `listener` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, state: AgentHttp, shutdown: impl Future<Output = ()>) {
    crate::http::serve_with(listener, move |req| respond(state.clone(), req), shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 34 item 6: `/start`'s rules are compiled off the runtime's one thread. The runtime's
    /// one blocking thread is held by the test, so the check that `/start` hands to the blocking
    /// pool waits behind it: the handler's first poll returns with no order sent, and `/status`
    /// answers meanwhile. Compiling on the runtime's thread, that first poll finished the check and
    /// sent the order. (Without the held thread the race is real: on a loaded machine the pool's
    /// thread could finish the check before the handler's first poll looked at it.)
    #[test]
    fn start_compiles_its_rules_off_the_runtimes_thread_while_status_answers() {
        let rt = tokio::runtime::Builder::new_current_thread().max_blocking_threads(1).build().unwrap();
        rt.block_on(async {
            let (release, held) = std::sync::mpsc::channel::<()>();
            let holder = tokio::task::spawn_blocking(move || held.recv());
            let (orders, mut loop_side) = mpsc::unbounded_channel();
            let (_view, status) = watch::channel(StatusView::initial(std::time::SystemTime::now()));
            let http = AgentHttp { orders, status };
            let body = Bytes::from_static(
                br#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"a","master_port":1,
            "log_monitoring_configuration":[{"name":"Step","logPattern":".*step.*","expectedRecurringFrequencyInSeconds":5}]}"#,
            );
            let mut start = std::pin::pin!(http.handle(&Method::POST, "/start", Ok(body)));
            let first = std::future::poll_fn(|cx| std::task::Poll::Ready(start.as_mut().poll(cx))).await;
            assert!(first.is_pending() && loop_side.try_recv().is_err(), "the first poll sent no order");
            let status = http.handle(&Method::GET, "/status", Ok(Bytes::new())).await;
            assert_eq!(status.status, StatusCode::OK);
            release.send(()).unwrap();
            holder.await.unwrap().unwrap();
            let the_loop = async {
                let order = loop_side.recv().await.expect("the /start's order");
                assert!(matches!(order.order, Order::Start(ref a) if a.rules.rules.is_some()));
                let _ = order.done.send(());
            };
            let (reply, ()) = tokio::join!(start, the_loop);
            assert_eq!(reply.status, StatusCode::OK);
        });
    }
}
