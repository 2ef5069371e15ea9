//! What a GPU selection that does not parse ([`GpuSelectionError`]) means for
//! the user of `--gpus` (`imgctl train-demo`, `imgctl verify --image`): a
//! usage error (exit 2), the flag in its line, and the grammar as the hint.

use super::advice::Advice;
use crate::gpus::GpuSelectionError;

/// The hint of every malformed `--gpus` value: the grammar both commands take.
const GPUS_HINT: &str = "use --gpus all, a count (--gpus 4) or device ids (--gpus 0,2,5; one device: --gpus device=3 or --gpus 3,); verify --image also takes GPU-/MIG- UUIDs";

/// Advice for [`GpuSelectionError`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    err.downcast_ref::<GpuSelectionError>().map(selection)
}

fn selection(e: &GpuSelectionError) -> Advice {
    let usage = |hint: &str| Advice::usage(hint.to_string());
    match e {
        GpuSelectionError::Empty => usage(GPUS_HINT).with_message("--gpus is empty"),
        GpuSelectionError::Zero => usage(
            "ask for 1 GPU or more; GPU 0 alone is --gpus device=0 (or --gpus 0,); \
             without GPUs, omit --gpus (train-demo) or pass --expect-gpus 0 (verify)",
        )
        .with_message("--gpus 0 asks for no GPU"),
        GpuSelectionError::NotUnderstood { text } => usage(GPUS_HINT).with_message(format!(
            "--gpus {text:?} is not `all`, a count or a list of device ids"
        )),
        GpuSelectionError::EmptyEntry { text, entry } => usage(GPUS_HINT).with_message(format!(
            "--gpus {text:?} is a malformed GPU list: entry {entry} is empty"
        )),
        GpuSelectionError::BadEntry { text, part } => usage(GPUS_HINT).with_message(format!(
            "--gpus {text:?} is a malformed GPU list: {part:?} is not a device index or a GPU-/MIG- UUID"
        )),
        GpuSelectionError::Twice { text, device } => usage("list each device once")
            .with_message(format!("--gpus {text:?} lists GPU {device} twice")),
    }
}

#[cfg(test)]
mod tests {
    use crate::commands::error::{render_error, status_of};
    use crate::error::ExitStatus;
    use crate::gpus::GpuSelection;

    fn text(s: &str) -> String {
        let e = anyhow::Error::from(GpuSelection::parse(s).unwrap_err());
        assert_eq!(status_of(&e), ExitStatus::Usage, "{s}");
        render_error(&e)
    }

    #[test]
    fn every_bad_selection_names_the_flag() {
        assert_eq!(
            text("0,,2"),
            "error: --gpus \"0,,2\" is a malformed GPU list: entry 2 is empty\n\n\
             hint: use --gpus all, a count (--gpus 4) or device ids (--gpus 0,2,5; one device: \
             --gpus device=3 or --gpus 3,); verify --image also takes GPU-/MIG- UUIDs\n"
        );
        assert!(text("").starts_with("error: --gpus is empty\n"));
        assert_eq!(
            text("0"),
            "error: --gpus 0 asks for no GPU\n\n\
             hint: ask for 1 GPU or more; GPU 0 alone is --gpus device=0 (or --gpus 0,); \
             without GPUs, omit --gpus (train-demo) or pass --expect-gpus 0 (verify)\n"
        );
        assert!(text("two")
            .starts_with("error: --gpus \"two\" is not `all`, a count or a list of device ids\n"));
        assert!(text("0,x").starts_with(
            "error: --gpus \"0,x\" is a malformed GPU list: \"x\" is not a device index or a GPU-/MIG- UUID\n"
        ));
        assert!(text("1,GPU-a,GPU-a").starts_with(
            "error: --gpus \"1,GPU-a,GPU-a\" lists GPU GPU-a twice\n\nhint: list each device once\n"
        ));
    }
}
