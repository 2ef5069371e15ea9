//! "This parameter's gradient is final": libtorch's post-accumulate-grad hook
//! (the C++ side of `Tensor.register_post_accumulate_grad_hook`), set through
//! our small C++ shim `csrc/torch_ext.cpp` because tch exposes no hooks.
//!
//! [`GradHooks`] sets one hook per parameter; during a backward pass each
//! hook reports its parameter to [`Readiness`], which counts down the
//! parameters of each gradient bucket and wakes whoever waits for a bucket
//! (the all-reduce worker of [`super::overlap`]). Hooks run on the autograd
//! thread while backward is still running, so the callback only takes a lock
//! and notifies. This module knows nothing of collectives.
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tch::Tensor;

use crate::sys::torch_ext::{GradReady, GradReadyHooks};

/// Per-backward state of the buckets.
#[derive(Debug, Default)]
struct State {
    /// Parameters of each bucket not yet reported in this backward pass.
    remaining: Vec<usize>,
    /// Buckets in the order their last parameter was reported.
    completed: Vec<usize>,
    /// Between [`Readiness::arm`] and [`Readiness::close`].
    armed: bool,
    /// Backward has ended: every bucket counts as ready.
    closed: bool,
    /// Backward failed: waiters give up.
    aborted: bool,
    /// Reports seen while armed (for tests and statistics).
    reports: u64,
}

/// Which gradient buckets are final in the current backward pass.
#[derive(Debug)]
pub struct Readiness {
    /// The bucket of each parameter (by parameter index).
    param_bucket: Vec<usize>,
    /// Parameters per bucket.
    sizes: Vec<usize>,
    state: Mutex<State>,
    cv: Condvar,
}

/// What [`Readiness::wait`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// Every parameter of the bucket reported during backward.
    Reported,
    /// Backward ended first (parameters without a gradient keep their zeros).
    BackwardEnded,
    /// Backward failed: stop.
    Aborted,
}

impl Readiness {
    /// Readiness over buckets, given the bucket of each parameter.
    pub fn new(param_bucket: Vec<usize>) -> Self {
        let buckets = param_bucket.iter().map(|&b| b + 1).max().unwrap_or(0);
        let mut sizes = vec![0; buckets];
        for &b in &param_bucket {
            sizes[b] += 1;
        }
        Self {
            param_bucket,
            sizes,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a waiter panicked; the counts stay valid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.sizes.len()
    }

    /// Starts a backward pass: every bucket waits for all its parameters.
    pub fn arm(&self) {
        let mut s = self.lock();
        s.remaining = self.sizes.clone();
        s.completed.clear();
        s.armed = true;
        s.closed = false;
        s.aborted = false;
        s.reports = 0;
    }

    /// Parameter `index` has its final gradient (called by the hooks).
    pub fn report(&self, index: usize) {
        let Some(&b) = self.param_bucket.get(index) else {
            return;
        };
        let mut s = self.lock();
        if !s.armed {
            return; // a backward pass outside a synchronised step
        }
        s.reports += 1;
        if let Some(r) = s.remaining.get_mut(b) {
            if *r > 0 {
                *r -= 1;
                if *r == 0 {
                    s.completed.push(b);
                    self.cv.notify_all();
                }
            }
        }
    }

    /// Ends the backward pass: buckets still waiting become ready (their
    /// missing parameters got no gradient), or, when `failed`, waiters stop.
    pub fn close(&self, failed: bool) {
        let mut s = self.lock();
        s.armed = false;
        s.closed = true;
        s.aborted = failed;
        self.cv.notify_all();
    }

    /// Blocks until bucket `b` is ready or backward has ended.
    pub fn wait(&self, b: usize) -> Ready {
        let mut s = self.lock();
        loop {
            if s.aborted {
                return Ready::Aborted;
            }
            if s.remaining.get(b).is_some_and(|&r| r == 0) {
                return Ready::Reported;
            }
            if s.closed {
                return Ready::BackwardEnded;
            }
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Whether a backward pass is running (armed and not yet closed).
    pub fn backward_running(&self) -> bool {
        let s = self.lock();
        s.armed && !s.closed
    }

    /// The buckets that completed during the last backward pass, in order.
    pub fn completion_order(&self) -> Vec<usize> {
        self.lock().completed.clone()
    }

    /// Hook reports seen during the last backward pass.
    pub fn reports(&self) -> u64 {
        self.lock().reports
    }
}

/// Ends a backward pass when dropped, so an early return or a panic inside
/// backward cannot leave a waiter blocked.
#[derive(Debug)]
pub struct CloseOnDrop<'a> {
    readiness: &'a Readiness,
    /// Set once backward has returned normally.
    pub succeeded: bool,
}

impl<'a> CloseOnDrop<'a> {
    /// Guards one backward pass of `readiness` (already armed).
    pub fn new(readiness: &'a Readiness) -> Self {
        Self {
            readiness,
            succeeded: false,
        }
    }
}

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.readiness.close(!self.succeeded);
    }
}

/// Each hook reports its parameter here, on the autograd thread.
impl GradReady for Readiness {
    fn grad_ready(&self, index: usize) {
        self.report(index);
    }
}

/// Post-accumulate-grad hooks on a set of parameters, reporting to one
/// [`Readiness`]; removed when dropped.
pub struct GradHooks {
    hooks: GradReadyHooks<Readiness>,
}

impl std::fmt::Debug for GradHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradHooks")
            .field("params", &self.hooks.len())
            .field("buckets", &self.hooks.sink().buckets())
            .finish()
    }
}

impl GradHooks {
    /// Hooks `params` (leaf tensors that require grad; parameter `i` reports
    /// index `i`) to `readiness`. Replaces earlier hooks of those tensors.
    pub fn set(params: Vec<(String, Tensor)>, readiness: Arc<Readiness>) -> anyhow::Result<Self> {
        let mut hooks = GradReadyHooks::new(readiness);
        for (i, (name, t)) in params.into_iter().enumerate() {
            hooks.add(t, i).map_err(|why| {
                anyhow::anyhow!("could not set the gradient hook of parameter {name}: {why}")
            })?;
        }
        Ok(Self { hooks })
    }

    /// The readiness the hooks report to.
    pub fn readiness(&self) -> &Arc<Readiness> {
        self.hooks.sink()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tch::{nn, nn::Module, Device, Kind};

    fn two_layers() -> (nn::VarStore, nn::Sequential) {
        let vs = nn::VarStore::new(Device::Cpu);
        let net = nn::seq()
            .add(nn::linear(vs.root() / "a", 4, 8, Default::default()))
            .add_fn(|x| x.relu())
            .add(nn::linear(vs.root() / "b", 8, 2, Default::default()));
        (vs, net)
    }

    fn sorted_params(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
        let mut v: Vec<_> = vs.variables().into_iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    #[test]
    fn every_parameter_reports_once_per_backward_and_buckets_complete_in_backward_order() {
        let (vs, net) = two_layers();
        // a.bias, a.weight -> bucket 0; b.bias, b.weight -> bucket 1.
        let readiness = Arc::new(Readiness::new(vec![0, 0, 1, 1]));
        let hooks = GradHooks::set(sorted_params(&vs), readiness.clone()).unwrap();
        let x = Tensor::ones([3, 4], (Kind::Float, Device::Cpu));
        for _ in 0..2 {
            readiness.arm();
            net.forward(&x).sum(Kind::Float).backward();
            assert_eq!(readiness.reports(), 4);
            // The last layer's gradients are final first.
            assert_eq!(readiness.completion_order(), vec![1, 0]);
            assert_eq!(readiness.wait(0), Ready::Reported);
            readiness.close(false);
        }
        // Outside an armed pass, nothing is counted; after Drop, no hook runs.
        net.forward(&x).sum(Kind::Float).backward();
        assert_eq!(readiness.reports(), 4, "still the last armed pass's count");
        drop(hooks);
        assert_eq!(Arc::strong_count(&readiness), 1);
        readiness.arm();
        net.forward(&x).sum(Kind::Float).backward();
        assert_eq!(readiness.reports(), 0);
    }

    #[test]
    fn a_tensor_that_needs_no_grad_is_refused_by_name() {
        let t = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        let err = GradHooks::set(
            vec![("frozen.weight".into(), t)],
            Arc::new(Readiness::new(vec![0])),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("frozen.weight"), "{err}");
        assert!(err.contains("requires grad"), "{err}");
    }

    #[test]
    fn waiters_wake_when_backward_ends_or_fails() {
        let r = Arc::new(Readiness::new(vec![0, 1]));
        r.arm();
        r.report(1);
        assert_eq!(r.wait(1), Ready::Reported);
        let r2 = r.clone();
        let waiter = std::thread::spawn(move || r2.wait(0));
        std::thread::sleep(Duration::from_millis(20));
        {
            let _guard = CloseOnDrop::new(&r); // dropped without success
        }
        assert_eq!(waiter.join().unwrap(), Ready::Aborted);
        r.arm();
        r.close(false);
        assert_eq!(r.wait(0), Ready::BackwardEnded);
        // Out-of-range reports are ignored.
        r.arm();
        r.report(7);
        assert_eq!(r.reports(), 0);
    }
}
