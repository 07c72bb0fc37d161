//! The job-token challenge: each side proves it knows the token with an HMAC-SHA256 over both
//! nonces, so the token itself never crosses the wire and a recorded proof is useless later.
//!
//! The worker proves first (so the master can refuse it with an error frame), then the master
//! proves itself in its admission frame, so a worker never trusts a master without the token.
//! Each proof is bound to its role, so one side's proof cannot be reflected back as the other's.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes in a nonce.
pub const NONCE_LEN: usize = 32;

use crate::rank::Role;

const DOMAIN: &[u8] = b"rankvisor rendezvous v1\0";

/// The side that computes a proof, as the proof's domain label: a master's proof is never a
/// worker's (no reflection).
fn label(role: Role) -> &'static [u8] {
    match role {
        Role::Master => b"master\0",
        Role::Worker => b"worker\0",
    }
}

fn name(role: Role) -> &'static str {
    match role {
        Role::Master => "master",
        Role::Worker => "worker",
    }
}

/// A failed challenge or proof.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The operating system's random source failed.
    #[error("cannot draw a random nonce from the operating system: {0}")]
    Random(String),
    /// A nonce or proof is not the expected hex.
    #[error("{field} {seen:?} is not {expected} bytes of hex")]
    BadHex {
        /// The frame field at fault.
        field: &'static str,
        /// The value seen (cut to 80 characters).
        seen: String,
        /// The byte length expected.
        expected: usize,
    },
    /// The proof was computed with another token.
    #[error("the {role}'s proof of the job token does not match (RANKVISOR_JOB_TOKEN differs between the replicas)")]
    Mismatch {
        /// The side whose proof failed.
        role: &'static str,
    },
}

/// Draw a fresh nonce, hex-encoded.
pub fn new_nonce() -> Result<String, AuthError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(hex::encode(nonce))
}

/// The proof `role` sends: HMAC-SHA256(token, domain | role | server nonce | client nonce), hex.
pub fn prove(token: &[u8], role: Role, server_nonce: &str, client_nonce: &str) -> Result<String, AuthError> {
    Ok(hex::encode(mac(token, role, server_nonce, client_nonce)?.finalize().into_bytes()))
}

/// Check the proof `role` sent, in constant time.
pub fn verify(token: &[u8], role: Role, server_nonce: &str, client_nonce: &str, proof: &str) -> Result<(), AuthError> {
    let proof = unhex("proof", proof, 32)?;
    mac(token, role, server_nonce, client_nonce)?
        .verify_slice(&proof)
        .map_err(|_| AuthError::Mismatch { role: name(role) })
}

fn mac(token: &[u8], role: Role, server_nonce: &str, client_nonce: &str) -> Result<Hmac<Sha256>, AuthError> {
    let server = unhex("server nonce", server_nonce, NONCE_LEN)?;
    let client = unhex("client nonce", client_nonce, NONCE_LEN)?;
    // HMAC takes keys of any length; the error branch exists only in the trait's signature.
    let mut mac = Hmac::<Sha256>::new_from_slice(token).map_err(|_| AuthError::Mismatch { role: name(role) })?;
    mac.update(DOMAIN);
    mac.update(label(role));
    mac.update(&server);
    mac.update(&client);
    Ok(mac)
}

fn unhex(field: &'static str, text: &str, expected: usize) -> Result<Vec<u8>, AuthError> {
    let bad = || AuthError::BadHex { field, seen: text.chars().take(80).collect(), expected };
    let bytes = hex::decode(text).map_err(|_| bad())?;
    if bytes.len() == expected {
        Ok(bytes)
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_are_fresh_hex() {
        let a = new_nonce().unwrap();
        let b = new_nonce().unwrap();
        assert_eq!(a.len(), 2 * NONCE_LEN);
        assert_ne!(a, b);
        assert!(hex::decode(&a).is_ok());
    }

    #[test]
    fn both_sides_verify_each_other() {
        let (s, c) = (new_nonce().unwrap(), new_nonce().unwrap());
        for role in [Role::Master, Role::Worker] {
            let p = prove(b"secret", role, &s, &c).unwrap();
            assert_eq!(verify(b"secret", role, &s, &c, &p), Ok(()));
            assert!(!p.contains("736563726574"), "the token's hex never appears");
        }
    }

    #[test]
    fn a_wrong_token_fails_and_names_the_side() {
        let (s, c) = (new_nonce().unwrap(), new_nonce().unwrap());
        let p = prove(b"secret", Role::Worker, &s, &c).unwrap();
        let e = verify(b"other", Role::Worker, &s, &c, &p).unwrap_err();
        assert_eq!(e, AuthError::Mismatch { role: "worker" });
        assert!(e.to_string().contains("the worker's proof of the job token does not match"), "{e}");
    }

    #[test]
    fn proofs_are_bound_to_role_and_nonces() {
        let (s, c, other) = (new_nonce().unwrap(), new_nonce().unwrap(), new_nonce().unwrap());
        let worker = prove(b"k", Role::Worker, &s, &c).unwrap();
        assert!(verify(b"k", Role::Master, &s, &c, &worker).is_err(), "no reflection");
        assert!(verify(b"k", Role::Worker, &other, &c, &worker).is_err(), "no replay");
        assert!(verify(b"k", Role::Worker, &s, &other, &worker).is_err(), "no replay");
        assert!(verify(b"k", Role::Worker, &c, &s, &worker).is_err(), "nonce order matters");
    }

    #[test]
    fn bad_hex_names_the_field() {
        let s = new_nonce().unwrap();
        let e = prove(b"k", Role::Worker, &s, "zz").unwrap_err();
        assert_eq!(e, AuthError::BadHex { field: "client nonce", seen: "zz".into(), expected: 32 });
        let e = prove(b"k", Role::Worker, "abcd", &s).unwrap_err().to_string();
        assert_eq!(e, "server nonce \"abcd\" is not 32 bytes of hex");
        let e = verify(b"k", Role::Worker, &s, &s, &"a".repeat(500)).unwrap_err().to_string();
        assert!(e.starts_with("proof \"aaaa"), "{e}");
        assert!(e.len() < 200, "the echoed value is cut: {e}");
    }

    #[test]
    fn known_answer() {
        // Pins the wire format: changing the MAC input breaks every deployed peer.
        let s = "00".repeat(32);
        let c = "11".repeat(32);
        let p = prove(b"token", Role::Worker, &s, &c).unwrap();
        let mut mac = Hmac::<Sha256>::new_from_slice(b"token").unwrap();
        mac.update(b"rankvisor rendezvous v1\0worker\0");
        mac.update(&[0u8; 32]);
        mac.update(&[0x11u8; 32]);
        assert_eq!(p, hex::encode(mac.finalize().into_bytes()));
    }
}
