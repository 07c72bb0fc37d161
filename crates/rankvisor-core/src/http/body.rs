//! A request body read whole, at most a given size: the one reader of every endpoint that takes
//! a body, so that a body too large and a body that is not well-formed HTTP get their own status.

use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Bytes};
use hyper::StatusCode;

/// Why a request body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyError {
    /// 413 for a body over the limit, 400 for a malformed one (a broken chunked encoding, a
    /// connection closed before `Content-Length` bytes).
    pub status: StatusCode,
    /// What was wrong, for the reply.
    pub detail: String,
}

/// Read `body` whole, refusing it past `max` bytes.
pub async fn read_body<B>(body: B, max: usize) -> Result<Bytes, BodyError>
where
    B: Body,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    match Limited::new(body, max).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(BodyError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            detail: format!("request body: {e} (at most {max} bytes)"),
        }),
        Err(e) => Err(BodyError { status: StatusCode::BAD_REQUEST, detail: format!("request body: {e}") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use hyper::body::Frame;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// One byte, then the error hyper gives for a broken chunked encoding.
    struct Broken(bool);

    impl Body for Broken {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            let sent = std::mem::replace(&mut self.0, true);
            Poll::Ready(Some(match sent {
                false => Ok(Frame::data(Bytes::from_static(b"a"))),
                true => Err(std::io::Error::other("invalid chunk size line")),
            }))
        }
    }

    #[tokio::test]
    async fn a_large_body_is_413_a_broken_one_400() {
        assert_eq!(read_body(Full::new(Bytes::from_static(b"abc")), 3).await, Ok(Bytes::from_static(b"abc")));
        let large = read_body(Full::new(Bytes::from_static(b"abcd")), 3).await.unwrap_err();
        assert_eq!(large.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", large.detail);
        assert!(large.detail.contains("at most 3 bytes"), "{}", large.detail);
        let broken = read_body(Broken(false), 3).await.unwrap_err();
        assert_eq!(broken.status, StatusCode::BAD_REQUEST, "{}", broken.detail);
        assert!(broken.detail.contains("invalid chunk size line"), "{}", broken.detail);
    }
}
