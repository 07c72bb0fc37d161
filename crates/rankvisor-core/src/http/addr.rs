//! `--http-addr`: where the local HTTP endpoint listens, or `off`.

use std::net::SocketAddr;

/// Where to serve the probes, `/metrics` and `/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpAddr {
    /// No HTTP endpoint.
    Off,
    /// Listen here.
    Listen(SocketAddr),
}

/// The `--http-addr` value is neither `off` nor an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--http-addr {value:?} (RANKVISOR_HTTP_ADDR) is invalid: expected off or IP:PORT, e.g. 0.0.0.0:9400")]
pub struct HttpAddrError {
    /// What was given.
    pub value: String,
}

impl HttpAddr {
    /// The default: every interface, port 9400.
    pub const DEFAULT: &'static str = "0.0.0.0:9400";

    /// Read `off` or `IP:PORT` (`[::]:9400` for IPv6).
    pub fn parse(s: &str) -> Result<Self, HttpAddrError> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("off") {
            return Ok(Self::Off);
        }
        t.parse().map(Self::Listen).map_err(|_| HttpAddrError { value: s.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_off_and_addresses() {
        assert_eq!(HttpAddr::parse("off"), Ok(HttpAddr::Off));
        assert_eq!(HttpAddr::parse("OFF"), Ok(HttpAddr::Off));
        assert_eq!(HttpAddr::parse(HttpAddr::DEFAULT), Ok(HttpAddr::Listen("0.0.0.0:9400".parse().unwrap())));
        assert_eq!(HttpAddr::parse("127.0.0.1:0"), Ok(HttpAddr::Listen("127.0.0.1:0".parse().unwrap())));
        assert_eq!(HttpAddr::parse("[::]:9400"), Ok(HttpAddr::Listen("[::]:9400".parse().unwrap())));
        for bad in ["", "9400", ":9400", "localhost:9400", "0.0.0.0", "0.0.0.0:99999", "on"] {
            let e = HttpAddr::parse(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }
}
