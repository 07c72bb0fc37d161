//! A training smoke test under rankvisor: a small MLP fits a synthetic regression set with Adam,
//! on this replica's shard (`RANK` of `WORLD_SIZE`), checkpointing every `--checkpoint-every` steps
//! and resuming from its newest checkpoint when rankvisor restarts it (`RANKVISOR_RESTART_COUNT`).
//!
//! Build: `bash scripts/setup-torch.sh` for libtorch, then
//! `cargo build -p rankvisor-trainer --example smoke_train` (the rankvisor binary never links libtorch).
//!
//! Output, for people and for tests/heavy/training.rs: a progress line every few steps, one
//! `RESUMED {json}` line when it continues from a checkpoint, and one `RESULT {json}` line at the
//! end. With `RANKVISOR_HEARTBEAT_FILE` set it writes `{"step":..,"loss":..,"checkpoint_step":..}`
//! there after every step. Exit 0 when the final loss is under `--loss-threshold`, 1 when it is not
//! (or at `--crash-at-step`), 2 on a bad environment, flag or checkpoint.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use rankvisor_trainer::{trainer_env_from_process, write_heartbeat, Progress, TrainerEnv};
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

/// Command-line flags.
#[derive(Debug, Parser)]
#[command(name = "smoke_train", about = "tch smoke trainer for rankvisor")]
struct Args {
    /// Where checkpoints go (a `rank-N` directory per replica is made below it).
    #[arg(long)]
    checkpoint_dir: PathBuf,
    /// Optimizer steps to train.
    #[arg(long, default_value_t = 200)]
    steps: u64,
    /// Save a checkpoint every this many steps.
    #[arg(long, default_value_t = 10)]
    checkpoint_every: u64,
    /// The run passes when the final loss (MSE on its shard) is below this.
    #[arg(long, default_value_t = 0.05)]
    loss_threshold: f64,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 0.01)]
    lr: f64,
    /// Rows in the whole synthetic data set (each rank trains on its share).
    #[arg(long, default_value_t = 2048)]
    samples: i64,
    /// On the first start only (restart count 0), exit 1 right after this step, before its checkpoint.
    #[arg(long)]
    crash_at_step: Option<u64>,
    /// Only this rank crashes (default: every rank).
    #[arg(long)]
    crash_rank: Option<u32>,
    /// Print a progress line every this many steps.
    #[arg(long, default_value_t = 20)]
    print_every: u64,
    /// Pause this many milliseconds after each step, so a test can watch progress live.
    #[arg(long, default_value_t = 0)]
    step_delay_ms: u64,
}

const FEATURES: i64 = 8;
const HIDDEN: i64 = 32;
/// The data is the same on every rank (one seed), each rank takes its rows of it.
const DATA_SEED: i64 = 1234;
/// The model's initial weights differ per rank, but are reproducible.
const MODEL_SEED: i64 = 42;

fn main() -> ExitCode {
    let args = Args::parse();
    let env = match trainer_env_from_process() {
        Ok(env) => env,
        Err(e) => {
            eprintln!("smoke_train: {e}");
            return ExitCode::from(2);
        }
    };
    match train(&args, &env) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("smoke_train rank {}: {e}", env.shard());
            ExitCode::from(2)
        }
    }
}

/// A synthetic regression set: y = tanh(x W1) W2 + small noise, this rank's rows only.
fn shard_data(samples: i64, shard: u32, shards: u32) -> (Tensor, Tensor) {
    tch::manual_seed(DATA_SEED);
    let x = Tensor::randn([samples, FEATURES], (Kind::Float, Device::Cpu));
    let w1 = Tensor::randn([FEATURES, 4], (Kind::Float, Device::Cpu)) * 0.5;
    let w2 = Tensor::randn([4, 1], (Kind::Float, Device::Cpu));
    let noise = Tensor::randn([samples, 1], (Kind::Float, Device::Cpu)) * 0.01;
    let y = x.matmul(&w1).tanh().matmul(&w2) + noise;
    let rows =
        Tensor::arange_start_step(i64::from(shard), samples, i64::from(shards.max(1)), (Kind::Int64, Device::Cpu));
    (x.index_select(0, &rows), y.index_select(0, &rows))
}

fn model(vs: &nn::Path) -> impl Module {
    nn::seq().add(nn::linear(vs / "l1", FEATURES, HIDDEN, Default::default())).add_fn(|t| t.tanh()).add(nn::linear(
        vs / "l2",
        HIDDEN,
        1,
        Default::default(),
    ))
}

fn checkpoint_path(dir: &Path, step: u64) -> PathBuf {
    dir.join(format!("step-{step:08}.ot"))
}

/// The newest `step-N.ot` in `dir`, by step.
fn newest_checkpoint(dir: &Path) -> Option<(u64, PathBuf)> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let step = name.strip_prefix("step-")?.strip_suffix(".ot")?.parse::<u64>().ok()?;
            Some((step, e.path()))
        })
        .max_by_key(|(step, _)| *step)
}

/// Save atomically: a crash mid-save must not leave a broken newest checkpoint.
fn save_checkpoint(vs: &nn::VarStore, dir: &Path, step: u64) -> Result<(), String> {
    let path = checkpoint_path(dir, step);
    let tmp = dir.join(format!(".step-{step:08}.ot.tmp"));
    vs.save(&tmp).map_err(|e| format!("checkpoint {}: cannot save: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("checkpoint {}: cannot rename: {e}", path.display()))
}

fn train(args: &Args, env: &TrainerEnv) -> Result<ExitCode, String> {
    if args.checkpoint_every == 0 || args.print_every == 0 {
        return Err("--checkpoint-every and --print-every: expected a number >= 1, got 0".into());
    }
    let rank = env.shard();
    let dir = args.checkpoint_dir.join(format!("rank-{rank}"));
    if !env.is_restart() {
        // A first start begins from scratch: checkpoints of an earlier job are not this run's.
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("--checkpoint-dir {}: cannot create: {e}", dir.display()))?;

    let (x, y) = shard_data(args.samples, rank, env.shards());
    tch::manual_seed(MODEL_SEED + i64::from(rank));
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = model(&vs.root());
    let mut opt = nn::Adam::default().build(&vs, args.lr).map_err(|e| format!("cannot build Adam: {e}"))?;

    let mut start = 0;
    let mut checkpoint_step = None;
    if env.is_restart() {
        if let Some((step, path)) = newest_checkpoint(&dir) {
            vs.load(&path).map_err(|e| format!("checkpoint {}: cannot load: {e}", path.display()))?;
            start = step;
            checkpoint_step = Some(step);
            println!(
                "RESUMED {}",
                serde_json::json!({"rank": rank, "checkpoint_step": step, "restart_count": env.restart_count})
            );
        } else {
            println!("smoke_train rank={rank}: restart {} found no checkpoint: starting at step 0", env.restart_count);
        }
    }
    println!(
        "smoke_train rank={rank} shard={rank}/{} rows={} steps {}..{} restart_count={}",
        env.shards(),
        x.size().first().copied().unwrap_or(0),
        start + 1,
        args.steps,
        env.restart_count
    );

    for step in start + 1..=args.steps {
        let loss = net.forward(&x).mse_loss(&y, tch::Reduction::Mean);
        opt.backward_step(&loss);
        let loss_value = loss.double_value(&[]);
        let crash = !env.is_restart() && args.crash_at_step == Some(step) && args.crash_rank.is_none_or(|r| r == rank);
        if crash {
            println!("smoke_train rank={rank}: crashing after step {step} (--crash-at-step)");
            return Ok(ExitCode::from(1));
        }
        if step % args.checkpoint_every == 0 {
            save_checkpoint(&vs, &dir, step)?;
            checkpoint_step = Some(step);
        }
        if let Some(hb) = &env.heartbeat_file {
            let progress = Progress { step, loss: loss_value, checkpoint_step };
            write_heartbeat(hb, &progress).map_err(|e| format!("heartbeat {}: cannot write: {e}", hb.display()))?;
        }
        if args.step_delay_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(args.step_delay_ms));
        }
        if step == start + 1 || step % args.print_every == 0 {
            let saved = checkpoint_step.map_or_else(|| "none".to_string(), |s| s.to_string());
            println!("smoke_train rank={rank} step={step} loss={loss_value:.5} checkpoint_step={saved}");
        }
    }
    // The loss after the last update (also when a restart found nothing left to train).
    let loss_value = tch::no_grad(|| net.forward(&x).mse_loss(&y, tch::Reduction::Mean).double_value(&[]));
    let passed = loss_value < args.loss_threshold;
    println!(
        "RESULT {}",
        serde_json::json!({
            "rank": rank,
            "world_size": env.shards(),
            "step": args.steps,
            "loss": loss_value,
            "threshold": args.loss_threshold,
            "first_step": start + 1,
            "restart_count": env.restart_count,
            "passed": passed,
        })
    );
    if passed {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "smoke_train rank={rank}: final loss {loss_value} is not under --loss-threshold {}",
            args.loss_threshold
        );
        Ok(ExitCode::from(1))
    }
}
