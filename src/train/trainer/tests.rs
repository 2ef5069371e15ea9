//! Unit tests of [`super`] (the trainer).
use super::*;

#[test]
fn a_libtorch_panic_becomes_a_one_line_error() {
    // A real libtorch error raised through a panicking tch call.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let panic =
        std::panic::catch_unwind(|| Tensor::zeros([2], (Kind::Float, Device::Cpu)).view([3]))
            .expect_err("a view of the wrong size panics in tch");
    std::panic::set_hook(hook);
    let e = step_panic_error(7, Device::Cpu, panic.as_ref());
    assert!(matches!(
        e.downcast_ref::<TrainerError>(),
        Some(TrainerError::Libtorch {
            step: 7,
            device: Device::Cpu,
            ..
        })
    ));
    let msg = e.to_string();
    assert!(
        msg.starts_with("training step 7 failed in libtorch: shape '[3]' is invalid"),
        "{msg}"
    );
    assert!(!msg.contains("unwrap") && !msg.contains('\n'), "{msg}");
    let oom = step_panic_error(
        1,
        Device::Cuda(0),
        &"called `Result::unwrap()` on an `Err` value: Torch(\"CUDA out of memory. Tried to allocate 2.00 GiB\\nException raised from malloc\")".to_string(),
    );
    assert_eq!(
        oom.to_string(),
        "training step 1 failed in libtorch: CUDA out of memory. Tried to allocate 2.00 GiB"
    );
}
