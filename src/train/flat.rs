//! Flat parameter and gradient buffers: every trainable variable of a
//! VarStore becomes a view into one contiguous tensor, and so does its
//! gradient.
//!
//! This is what lets the optimizer, the gradient clipping, the EMA and the
//! data-parallel all-reduce each run as a handful of kernels over one buffer
//! instead of one launch per parameter (tch 0.20 exposes no `_foreach_*` or
//! `_fused_adamw_` ops). It is the same trick as PyTorch DDP's
//! `gradient_as_bucket_view`: autograd accumulates into an existing `.grad` in
//! place when grad mode is off during backward (`torch/csrc/autograd/functions/accumulate_grad.h`),
//! so gradients land directly in the flat buffer. Owns the layout (names,
//! shapes, offsets, sorted by name) and the binding; knows nothing of training.
//!
//! Every parameter starts at a multiple of [`ALIGN_ELEMS`] elements, as torch's
//! caching allocator aligns every tensor it hands out (512 bytes). Packed
//! back to back, one odd-sized parameter (the default UNet's 3-element
//! `conv_out.bias`) left every parameter after it at a 6-byte offset in bf16:
//! cuDNN then may not pick its aligned tensor-core kernels for those weights,
//! and ATen's vectorized elementwise kernels fall back to scalar loads. The
//! gaps are zeros in every flat buffer (parameters, gradients, moments, EMA)
//! and stay zero: their gradient is zero, and so is AdamW's update of them.
use tch::nn::VarStore;
use tch::{Kind, Tensor};

/// One parameter's place in the flat buffer.
#[derive(Debug, Clone)]
pub struct FlatEntry {
    /// The VarStore name (diffusers state-dict key).
    pub name: String,
    /// The parameter's shape.
    pub shape: Vec<i64>,
    /// First element in the flat buffer.
    pub offset: i64,
    /// Number of elements.
    pub numel: i64,
}

/// Each parameter's offset in a flat buffer is a multiple of this many
/// elements: 512 bytes in fp32, 256 in bf16 (torch's allocator aligns blocks
/// to 512 bytes; cuDNN and ATen's vectorized kernels want 16).
pub const ALIGN_ELEMS: i64 = 128;

/// Where each trainable parameter lives in the flat buffers.
#[derive(Debug, Clone)]
pub struct FlatLayout {
    /// Parameters sorted by name.
    pub entries: Vec<FlatEntry>,
    /// Total number of elements of a flat buffer, alignment gaps included.
    pub numel: i64,
    /// Number of parameter elements (the model's parameter count).
    pub params: i64,
}

impl FlatLayout {
    /// The layout of `vs`'s trainable variables, sorted by name.
    pub fn of(vs: &VarStore) -> Self {
        let mut vars: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let mut offset = 0;
        let mut params = 0;
        let entries = vars
            .into_iter()
            .map(|(name, t)| {
                let numel = t.numel() as i64;
                let e = FlatEntry {
                    name,
                    shape: t.size(),
                    offset,
                    numel,
                };
                params += numel;
                offset = align_up(offset + numel);
                e
            })
            .collect();
        Self {
            entries,
            numel: offset,
            params,
        }
    }

    /// The view of `flat` holding parameter `e`, in its shape.
    pub fn view(&self, flat: &Tensor, e: &FlatEntry) -> Tensor {
        flat.narrow(0, e.offset, e.numel).view(e.shape.as_slice())
    }

    /// Each entry with `vs`'s variable of that name, in layout order.
    pub fn with_vars(&self, vs: &VarStore) -> Vec<(FlatEntry, Tensor)> {
        let vars = vs.variables();
        self.entries
            .iter()
            .map(|e| (e.clone(), vars[&e.name].shallow_clone()))
            .collect()
    }

    /// `(name, view)` pairs over `flat`, in layout order.
    pub fn named_views(&self, flat: &Tensor) -> Vec<(String, Tensor)> {
        self.entries
            .iter()
            .map(|e| (e.name.clone(), self.view(flat, e)))
            .collect()
    }

    /// Moves `vs`'s trainable variables into one new flat buffer of `kind` and
    /// makes each variable a view of it; returns the buffer.
    pub fn bind_params(&self, vs: &VarStore, kind: Kind) -> Tensor {
        let vars = vs.variables();
        let flat = Tensor::zeros([self.numel], (kind, vs.device()));
        tch::no_grad(|| {
            for e in &self.entries {
                let mut var = vars[&e.name].shallow_clone();
                let mut view = self.view(&flat, e);
                view.copy_(&var);
                var.set_data(&view);
            }
        });
        flat
    }

    /// Gives every trainable variable of `vs` a gradient that is a view of one
    /// new zeroed flat buffer of `kind`; returns the buffer.
    ///
    /// A zero-weighted sum of all parameters is back-propagated first so that
    /// autograd allocates each `.grad`; their storage is then replaced by the
    /// views. Later backward passes accumulate into them in place.
    pub fn bind_grads(&self, vs: &VarStore, kind: Kind) -> Tensor {
        let vars = vs.variables();
        let flat = Tensor::zeros([self.numel], (kind, vs.device()));
        let total = self
            .entries
            .iter()
            .map(|e| vars[&e.name].sum(vars[&e.name].kind()).to_kind(Kind::Float))
            .reduce(|a, b| a + b);
        if let Some(total) = total {
            (total * 0.0).backward();
        }
        tch::no_grad(|| {
            for e in &self.entries {
                let mut grad = vars[&e.name].grad();
                grad.set_data(&self.view(&flat, e));
            }
        });
        flat
    }
}

/// `n` rounded up to a multiple of [`ALIGN_ELEMS`].
pub fn align_up(n: i64) -> i64 {
    (n + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{nn, nn::Module, Device};

    #[test]
    fn every_parameter_starts_aligned_and_the_gaps_stay_zero() {
        let vs = VarStore::new(Device::Cpu);
        // 3 outputs: 3 bias elements and 15 weights, odd sizes like the
        // UNet's conv_out.bias.
        let a = nn::linear(vs.root() / "a", 5, 3, Default::default());
        let _b = nn::linear(vs.root() / "b", 7, 2, Default::default());
        let layout = FlatLayout::of(&vs);
        assert_eq!(layout.params, 3 + 15 + 2 + 14);
        let offsets: Vec<i64> = layout.entries.iter().map(|e| e.offset).collect();
        assert_eq!(offsets, vec![0, 128, 256, 384], "{:?}", layout.entries);
        assert_eq!(layout.numel, 512);
        let flat = layout.bind_params(&vs, Kind::BFloat16);
        let grads = layout.bind_grads(&vs, Kind::BFloat16);
        let base = flat.data_ptr() as usize;
        for (e, t) in layout.with_vars(&vs) {
            let at = t.data_ptr() as usize - base;
            assert_eq!(at % 256, 0, "{} starts {at} bytes in", e.name);
        }
        let x = Tensor::ones([4, 5], (Kind::BFloat16, Device::Cpu));
        a.forward(&x).sum(Kind::Float).backward();
        // Only parameter elements carry values; the gaps hold zeros.
        let mut mask = vec![0f32; layout.numel as usize];
        for e in &layout.entries {
            for m in &mut mask[e.offset as usize..(e.offset + e.numel) as usize] {
                *m = 1.0;
            }
        }
        let gaps = Tensor::from_slice(&mask).lt(0.5);
        let g = grads.to_kind(Kind::Float);
        let in_gaps = g.masked_select(&gaps).abs().sum(Kind::Float);
        assert_eq!(f64::try_from(in_gaps).unwrap(), 0.0);
        assert!(f64::try_from(g.abs().sum(Kind::Float)).unwrap() > 0.0);
    }

    #[test]
    fn gradients_accumulate_into_the_flat_buffer() {
        let vs = VarStore::new(Device::Cpu);
        let lin = nn::linear(vs.root() / "lin", 3, 2, Default::default());
        let layout = FlatLayout::of(&vs);
        assert_eq!(layout.params, 3 * 2 + 2);
        let params = layout.bind_params(&vs, Kind::Float);
        let mut grads = layout.bind_grads(&vs, Kind::Float);
        assert_eq!(f64::try_from(grads.abs().sum(Kind::Float)).unwrap(), 0.0);
        let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
        lin.forward(&x).sum(Kind::Float).backward();
        // d(sum)/d(bias) = batch size for each output.
        let bias = layout
            .entries
            .iter()
            .find(|e| e.name == "lin.bias")
            .unwrap();
        let gb = layout.view(&grads, bias);
        assert_eq!(
            Vec::<f32>::try_from(gb.flatten(0, -1)).unwrap(),
            vec![4.0, 4.0]
        );
        // The variable sees the flat buffer's values.
        tch::no_grad(|| {
            let _ = params.shallow_clone().fill_(0.5);
        });
        assert_eq!(f64::try_from(lin.ws.mean(Kind::Float)).unwrap(), 0.5);
        let _ = grads.zero_();
        assert_eq!(
            f64::try_from(lin.bs.as_ref().unwrap().grad().sum(Kind::Float)).unwrap(),
            0.0
        );
    }
}
