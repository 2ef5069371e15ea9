//! An image's fit facts ([`crate::gpus::fit::ImageFacts`]) from what its
//! build recorded: the labels imgctl's render sets (bound to the image's
//! digest through its config), and the same facts of each bundled profile,
//! from its spec and the tables, so that a refusal can name the profile
//! that would fit.
use std::collections::BTreeMap;

use crate::gpus::archs;
use crate::gpus::fit::ImageFacts;
use crate::image::render::labels;
use crate::image::specs::{self, compat, SpecSource};

/// The facts in an image's labels. Without imgctl's labels (an image imgctl
/// did not render) the error says which label is missing; without the arch
/// label (an imgctl from before it) the list comes from the wheel table.
pub fn from_labels(l: &BTreeMap<String, String>) -> Result<ImageFacts, String> {
    let get = |k: &str| {
        l.get(k).cloned().ok_or_else(|| {
            format!("the image has no label {k}: it was not built by imgctl, so its torch, CUDA and driver floor are not recorded")
        })
    };
    let torch = get(labels::TORCH)?;
    let variant = get(labels::TORCH_VARIANT)?;
    let (sass, ptx, archs_source) = match l.get(labels::CUDA_ARCHS) {
        Some(list) => {
            let (sass, ptx) = parse_archs(list).ok_or_else(|| {
                format!(
                    "the label {} `{list}` is not an arch list",
                    labels::CUDA_ARCHS
                )
            })?;
            let source = l
                .get(labels::CUDA_ARCHS_SOURCE)
                .cloned()
                .unwrap_or_else(|| format!("the image's label {}", labels::CUDA_ARCHS));
            (sass, ptx, source)
        }
        None => {
            let w = archs::wheel_archs(&torch, &variant).ok_or_else(|| {
                format!("the image records no arch list ({}), and imgctl's table has none for torch {torch}+{variant}", labels::CUDA_ARCHS)
            })?;
            (w.sass.to_vec(), w.ptx.to_vec(), w.source.to_string())
        }
    };
    Ok(ImageFacts {
        torch,
        variant,
        cuda_runtime: get(labels::CUDA_RUNTIME)?,
        driver_min: get(labels::DRIVER_MIN)?,
        driver_native: get(labels::DRIVER_NATIVE)?,
        nccl: get(labels::NCCL)?,
        cudnn: get(labels::CUDNN)?,
        sass,
        ptx,
        archs_source,
    })
}

/// `sm_50 sm_90 compute_120` → ([50, 90], [120]).
fn parse_archs(list: &str) -> Option<(Vec<u32>, Vec<u32>)> {
    let (mut sass, mut ptx) = (Vec::new(), Vec::new());
    for word in list.split_whitespace() {
        if let Some(n) = word.strip_prefix("sm_") {
            sass.push(n.parse().ok()?);
        } else if let Some(n) = word.strip_prefix("compute_") {
            ptx.push(n.parse().ok()?);
        } else {
            return None;
        }
    }
    Some((sass, ptx))
}

/// The facts of one bundled profile (`cu128`), from its spec and the tables.
pub fn of_profile(name: &str) -> anyhow::Result<ImageFacts> {
    let loaded = specs::load(&SpecSource::Bundled {
        cuda: name.to_string(),
    })?;
    let s = &loaded.spec;
    let unknown = || {
        anyhow::anyhow!(
            "profile {name}: torch {}+{} is not in imgctl's tables",
            s.torch.version,
            s.torch.variant
        )
    };
    let wheel = compat::lookup(&s.torch.version, &s.torch.variant).ok_or_else(unknown)?;
    let driver = compat::min_driver(wheel.cuda).ok_or_else(unknown)?;
    let code = archs::wheel_archs(wheel.torch, wheel.variant).ok_or_else(unknown)?;
    Ok(ImageFacts {
        torch: wheel.torch.to_string(),
        variant: wheel.variant.to_string(),
        cuda_runtime: wheel.cuda_runtime.to_string(),
        driver_min: driver.minor_compat_driver.to_string(),
        driver_native: driver.native_driver.to_string(),
        nccl: wheel.nccl.to_string(),
        cudnn: wheel.cudnn.to_string(),
        sass: code.sass.to_vec(),
        ptx: code.ptx.to_vec(),
        archs_source: code.source.to_string(),
    })
}

/// Every bundled profile's facts, by name, in the bundled order.
pub fn bundled() -> Vec<(String, ImageFacts)> {
    specs::bundled()
        .into_iter()
        .filter_map(|(name, _)| Some((name.to_string(), of_profile(name).ok()?)))
        .collect()
}

/// The GPU models of the fit table's columns, one per generation.
const TABLE_MODELS: [&str; 8] = [
    "V100",
    "T4",
    "A100",
    "L40S",
    "H100",
    "B200",
    "B300",
    "RTX PRO 6000 Blackwell",
];

/// The fit of every bundled profile to each GPU generation, as Markdown:
/// `yes` (machine code for it), `PTX only` (JIT at first launch) or `no`,
/// on a driver that runs the profile's CUDA; and the least driver. The
/// README shows it; a test holds the two together.
pub fn fit_table() -> String {
    use crate::gpus::fit::{judge, Group, Level};
    let mut head = vec!["profile".to_string(), "torch".to_string()];
    let mut groups = Vec::new();
    for name in TABLE_MODELS {
        let row = archs::GPU_MODELS
            .iter()
            .find(|m| m.model == name)
            .expect("a model of the table");
        head.push(format!("{} (sm_{}{})", row.model, row.cc.0, row.cc.1));
        groups.push(Group {
            model: row.model.to_string(),
            cc: row.cc,
            driver: String::new(),
            nodes: 1,
        });
    }
    head.push("least driver".to_string());
    let mut out = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for (name, facts) in bundled() {
        let mut cells = vec![name.clone(), facts.wheel().replace("torch ", "")];
        for g in &groups {
            let g = Group {
                driver: facts.driver_native.clone(),
                ..g.clone()
            };
            let r = judge(&facts, std::slice::from_ref(&g), &[]);
            let worst = r
                .reasons
                .iter()
                .map(|x| x.level)
                .fold(Level::Pass, |a, b| match (a, b) {
                    (Level::Fail, _) | (_, Level::Fail) => Level::Fail,
                    (Level::Warn, _) | (_, Level::Warn) => Level::Warn,
                    _ => Level::Pass,
                });
            cells.push(
                match worst {
                    Level::Pass => "yes",
                    Level::Warn => "PTX only",
                    Level::Fail => "no",
                }
                .to_string(),
            );
        }
        cells.push(format!(
            "{} ({} native)",
            facts.driver_min, facts.driver_native
        ));
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's fit table is [`fit_table`]'s (`IMGCTL_BLESS=1` writes it).
    #[test]
    fn the_readme_fit_table_is_what_the_rules_give() {
        const START: &str = "<!-- fit-table: made by image::fit::fit_table, IMGCTL_BLESS=1 cargo test --lib fit_table -->\n";
        const END: &str = "<!-- /fit-table -->";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let (a, rest) = text
            .split_once(START)
            .expect("the README has the fit table's start marker");
        let (table, b) = rest
            .split_once(END)
            .expect("the README has the fit table's end marker");
        let want = fit_table();
        if std::env::var_os("IMGCTL_BLESS").is_some() {
            std::fs::write(&path, format!("{a}{START}{want}{END}{b}")).unwrap();
            return;
        }
        assert_eq!(table, want, "run IMGCTL_BLESS=1 cargo test --lib fit_table");
        // The rules, as the table shows them: a cu126 wheel has no Blackwell code.
        assert!(
            want.contains("| cu126 | 2.7.0+cu126 | yes | yes | yes | yes | yes | no | no | no |"),
            "{want}"
        );
    }

    #[test]
    fn the_labels_give_back_the_facts_of_the_profile() {
        let facts = of_profile("cu128").unwrap();
        let mut l = BTreeMap::new();
        l.insert(labels::TORCH.to_string(), facts.torch.clone());
        l.insert(labels::TORCH_VARIANT.to_string(), facts.variant.clone());
        l.insert(labels::CUDA_RUNTIME.to_string(), facts.cuda_runtime.clone());
        l.insert(labels::DRIVER_MIN.to_string(), facts.driver_min.clone());
        l.insert(
            labels::DRIVER_NATIVE.to_string(),
            facts.driver_native.clone(),
        );
        l.insert(labels::NCCL.to_string(), facts.nccl.clone());
        l.insert(labels::CUDNN.to_string(), facts.cudnn.clone());
        // An image from before the arch label: the table's list.
        assert_eq!(from_labels(&l).unwrap(), facts);
        l.insert(
            labels::CUDA_ARCHS.to_string(),
            "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120".into(),
        );
        let read = from_labels(&l).unwrap();
        assert_eq!((read.sass, read.ptx), (facts.sass, facts.ptx));
        l.insert(labels::CUDA_ARCHS.to_string(), "sm_90 gfx90a".into());
        assert!(from_labels(&l).unwrap_err().contains("is not an arch list"));
        l.remove(labels::TORCH);
        assert!(from_labels(&l).unwrap_err().contains("not built by imgctl"));
    }

    #[test]
    fn every_bundled_profile_has_its_facts() {
        let names: Vec<String> = bundled().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["cu124", "cu126", "cu128"]);
    }
}
