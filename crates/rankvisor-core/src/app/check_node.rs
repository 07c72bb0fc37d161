//! `rankvisor check-node`: print this node's health verdict; exit 0 only if healthy.

use crate::config::args::CheckNodeArgs;
use crate::config::{health_settings, kube_settings, EnvSnapshot, KubeSettings};
use crate::exit;
use crate::health::{self, NodeHealthSource};
use crate::kube::{check_node_name, KubeClient, KubeConfig};

/// The Kubernetes client and the checked node name, or a configuration error's message.
pub fn kube_client(k: &KubeSettings, env: &EnvSnapshot) -> Result<(KubeClient, String), String> {
    let node = k.node_name.clone().unwrap_or_default();
    check_node_name(&node).map_err(|e| e.to_string())?;
    let cfg = KubeConfig::resolve(&k.overrides, env.lookup()).map_err(|e| e.to_string())?;
    Ok((KubeClient::new(cfg).map_err(|e| e.to_string())?, node))
}

/// Print the verdict (text or JSON): 0 healthy, 138 unhealthy or unknown, 64 bad configuration.
pub fn run(a: &CheckNodeArgs, env: &EnvSnapshot) -> i32 {
    let mut warnings = Vec::new();
    let settings = health_settings(&a.node_health, a.require_health_label, false, &a.kube, env, &mut warnings);
    for w in warnings {
        tracing::warn!("{w}");
    }
    let observation = match settings.source {
        NodeHealthSource::File(p) => health::read_file_verdict(&p, a.require_health_label),
        NodeHealthSource::Kubernetes => {
            let (client, node) = match kube_client(&kube_settings(&a.kube), env) {
                Ok(c) => c,
                Err(e) => return super::config_error(&e, super::termination_path(None, env)),
            };
            let runtime = match super::runtime() {
                Ok(r) => r,
                Err(code) => return code,
            };
            runtime.block_on(health::read_kubernetes_verdict(&client, &node, a.require_health_label))
        }
        _ => {
            println!("node health checking is off (no labels source): treated as healthy");
            return 0;
        }
    };
    match observation {
        Ok(v) => {
            print!("{}", if a.json { health::render_json(&v) } else { health::render_text(&v) });
            if v.healthy {
                0
            } else {
                exit::EXTERNAL_FAILURE
            }
        }
        Err(e) => {
            tracing::error!("{e}");
            exit::EXTERNAL_FAILURE
        }
    }
}
