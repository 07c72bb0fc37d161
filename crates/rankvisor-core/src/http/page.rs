//! `GET /`: the live job page, one self-contained HTML file (inline CSS and JS, no external
//! fetch) compiled into the binary. It polls `/job` on the master (every replica, the job's phase
//! and why) or `/status` on a worker (that replica alone, with a link to the master), and marks
//! crash-looping, hung and unhealthy-node replicas with a word and a colour.

/// The page's `Content-Type`.
pub const CONTENT_TYPE: &str = "text/html; charset=utf-8";

/// The page, as served.
pub const JOB_PAGE: &str = include_str!("job_page.html");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_self_contained_and_small() {
        assert!(JOB_PAGE.starts_with("<!doctype html>"));
        assert!(JOB_PAGE.len() < 12 * 1024, "{} bytes: the PID 1 binary carries it", JOB_PAGE.len());
        for outside in ["http://", "https://", "src=", "@import", "url("] {
            let hits: Vec<&str> = JOB_PAGE.lines().filter(|l| l.contains(outside)).collect();
            // The only absolute URL allowed is the SVG namespace, which is a name, not a fetch.
            assert!(hits.iter().all(|l| l.contains("http://www.w3.org/2000/svg")), "{outside:?} in the page: {hits:?}");
        }
        for endpoint in ["\"/job\"", "\"/status\""] {
            assert!(JOB_PAGE.contains(endpoint), "the page polls {endpoint}");
        }
        assert!(!JOB_PAGE.contains("innerHTML"), "server values go in as text, never as HTML");
    }
}
