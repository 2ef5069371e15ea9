//! The trainer's checkpoints: saving the current step (weights, EMA,
//! optimizer state, data position) atomically, and loading one back into a
//! trainer of the same model.
use super::*;

impl Trainer {
    /// Writes a checkpoint of the current step under `out` atomically and
    /// prunes to `keep`, once [`Trainer::check_finite`] passed. Returns its
    /// directory.
    pub fn save_checkpoint(
        &self,
        out: &Path,
        epoch: u64,
        last_loss: Option<f64>,
    ) -> anyhow::Result<PathBuf> {
        self.check_finite()?;
        let state = State {
            schema_version: checkpoint::STATE_VERSION,
            step: self.step,
            epoch,
            samples_seen: self.samples_seen,
            seed: self.config.training.seed,
            optimizer_step: self.opt.step,
            ema_step: self.ema.step,
            scaler: self.scaler,
            world_size: self.sync.world_size(),
            batch_size: self.config.training.batch_size,
            configured_batch_size: Some(self.configured_batch_size),
            precision: self.precision.name().to_string(),
            last_loss,
            config: self.config.clone(),
            data: self.data.clone(),
            written_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
        };
        let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
        let dir = checkpoint::write_atomic(out, self.step, |dir| {
            weights::save_safetensors(&self.master_vs, &dir.join(checkpoint::MODEL_FILE))?;
            weights::write_tensors(
                &dir.join(checkpoint::EMA_FILE),
                &self.layout.named_views(&self.ema.shadow),
                Some(meta.clone()),
            )?;
            let mut moments = Vec::with_capacity(2 * self.layout.entries.len());
            for (name, v) in self.layout.named_views(&self.opt.exp_avg) {
                moments.push((format!("exp_avg.{name}"), v));
            }
            for (name, v) in self.layout.named_views(&self.opt.exp_avg_sq) {
                moments.push((format!("exp_avg_sq.{name}"), v));
            }
            weights::write_tensors(&dir.join(checkpoint::OPTIMIZER_FILE), &moments, None)?;
            std::fs::write(
                dir.join(checkpoint::CONFIG_FILE),
                serde_json::to_string_pretty(&self.config.model.to_diffusers_json())?,
            )?;
            std::fs::write(
                dir.join(checkpoint::STATE_FILE),
                serde_json::to_string_pretty(&state)?,
            )?;
            // The test hook of a slow write (a large checkpoint on a slow disk).
            if let Ok(v) = std::env::var(crate::env_vars::IMGCTL_TEST_CHECKPOINT_DELAY) {
                if let Ok(secs) = v.trim().parse::<f64>() {
                    if secs.is_finite() && secs > 0.0 {
                        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
                    }
                }
            }
            Ok(())
        })
        .with_context(|| {
            format!(
                "writing the checkpoint of step {} under {}",
                self.step,
                out.display()
            )
        })?;
        checkpoint::prune(out, self.config.training.keep)?;
        Ok(dir)
    }

    /// Restores weights, EMA, optimizer moments, counters and the loss scale
    /// from a checkpoint directory. The model config must match.
    pub fn load_checkpoint(&mut self, dir: &Path) -> anyhow::Result<State> {
        let state = checkpoint::read_state(dir)?;
        if state.config.model != self.config.model {
            return Err(TrainerError::ModelMismatch {
                dir: dir.to_path_buf(),
            }
            .into());
        }
        weights::load_diffusers_state_dict(&self.master_vs, &dir.join(checkpoint::MODEL_FILE))?;
        let ema = weights::read_tensors(&dir.join(checkpoint::EMA_FILE))?;
        let opt = weights::read_tensors(&dir.join(checkpoint::OPTIMIZER_FILE))?;
        let ema: std::collections::HashMap<String, Tensor> = ema.into_iter().collect();
        let opt: std::collections::HashMap<String, Tensor> = opt.into_iter().collect();
        tch::no_grad(|| -> anyhow::Result<()> {
            for e in &self.layout.entries {
                // Each tensor must be there with the parameter's shape, in a
                // floating dtype (fp32 as written; fp16/bf16 convert exactly).
                let find = |map: &std::collections::HashMap<String, Tensor>,
                            key: &str,
                            file: &'static str| {
                    let t = map.get(key).ok_or_else(|| TrainerError::MissingTensor {
                        dir: dir.to_path_buf(),
                        key: key.to_string(),
                        file,
                    })?;
                    let floating = matches!(t.kind(), Kind::Float | Kind::Half | Kind::BFloat16);
                    if t.size() != e.shape || !floating {
                        return Err(anyhow::Error::from(TrainerError::TensorMismatch {
                            dir: dir.to_path_buf(),
                            key: key.to_string(),
                            file,
                            found: format!("{:?} {:?}", t.size(), t.kind()),
                            expected: format!("{:?} Float", e.shape),
                        }));
                    }
                    Ok(t.shallow_clone())
                };
                let src = find(&ema, &e.name, checkpoint::EMA_FILE)?;
                self.layout
                    .view(&self.ema.shadow, e)
                    .copy_(&src.to_kind(Kind::Float).to_device(self.device));
                let m = find(
                    &opt,
                    &format!("exp_avg.{}", e.name),
                    checkpoint::OPTIMIZER_FILE,
                )?;
                self.layout
                    .view(&self.opt.exp_avg, e)
                    .copy_(&m.to_device(self.device));
                let v = find(
                    &opt,
                    &format!("exp_avg_sq.{}", e.name),
                    checkpoint::OPTIMIZER_FILE,
                )?;
                self.layout
                    .view(&self.opt.exp_avg_sq, e)
                    .copy_(&v.to_device(self.device));
            }
            Ok(())
        })?;
        self.opt.step = state.optimizer_step;
        self.ema.step = state.ema_step;
        if self.scaler.is_some() {
            self.scaler = Some(state.scaler.unwrap_or_default());
        }
        self.step = state.step;
        self.samples_seen = state.samples_seen;
        self.refresh_compute();
        Ok(state)
    }
}
