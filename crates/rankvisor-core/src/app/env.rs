//! `rankvisor env [--json]`: print the resolved rank contract.

use crate::config::{rank_env, EnvSnapshot};

/// Print the rank contract (text or JSON); exit 64 on a bad one.
pub fn run(json: bool, env: &EnvSnapshot) -> i32 {
    match rank_env(env) {
        Ok(rank) if json => {
            println!("{}", serde_json::to_string_pretty(&rank).unwrap_or_default());
            0
        }
        Ok(rank) => {
            print!("{rank}");
            for note in &rank.inferred {
                println!("inferred:       {note}");
            }
            0
        }
        Err(e) => super::config_error(&e.to_string(), super::termination_path(None, env)),
    }
}
