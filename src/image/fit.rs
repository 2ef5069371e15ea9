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
    of_spec(&specs::load(&SpecSource::Bundled {
        cuda: name.to_string(),
    })?)
}

/// The facts of an image built from `loaded`, from its spec and the tables
/// (what its labels will say).
pub fn of_spec(loaded: &specs::LoadedSpec) -> anyhow::Result<ImageFacts> {
    let name = &loaded.name;
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

/// The pip distribution each loaded library comes in (`torch.cudnn_loaded`
/// → `nvidia-cudnn`, then `-cu12`/`-cu13`), and its name in words.
const LOADED: [(&str, &str, &str); 4] = [
    (
        "torch.cudart_loaded",
        "nvidia-cuda-runtime",
        "the CUDA runtime",
    ),
    ("torch.cublas_loaded", "nvidia-cublas", "cuBLAS"),
    ("torch.cudnn_loaded", "nvidia-cudnn", "cuDNN"),
    ("torch.nccl_loaded", "nvidia-nccl", "NCCL"),
];

/// The `sbom` rule of the fit gate, on the trusted statements: every
/// library the newest signed verdict says torch loaded is in the signed
/// SBOM, at the same version. A mismatch is a FAIL naming both; a verdict
/// that records no loaded library (made without a GPU) is a WARN: nothing
/// could be compared.
pub fn sbom_reason(accepted: &[crate::image::sign::rules::Accepted]) -> crate::gpus::fit::Reason {
    use crate::gpus::fit::{Level, Reason};
    use crate::image::attest::{CYCLONEDX_PREDICATE, VERIFY_PREDICATE};
    let newest = |kind: &str| {
        accepted
            .iter()
            .filter(|a| a.predicate_type == kind)
            .max_by(|a, b| a.time.cmp(&b.time))
    };
    let reason = |level, line: String, image: String| Reason {
        rule: "sbom",
        level,
        gpu: "image".to_string(),
        line,
        image,
        fleet: String::new(),
        source: "the signed verify verdict and the signed CycloneDX SBOM of this image".to_string(),
    };
    let (Some(verdict), Some(sbom)) = (newest(VERIFY_PREDICATE), newest(CYCLONEDX_PREDICATE))
    else {
        return reason(
            Level::Warn,
            "no signed verdict and SBOM to compare: the libraries torch loads are not checked against the SBOM".to_string(),
            String::new(),
        );
    };
    let components: Vec<(String, String)> = sbom.statement["predicate"]["components"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|x| {
                    Some((
                        x["name"].as_str()?.to_lowercase(),
                        x["version"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let results = verdict.statement["predicate"]["results"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let (mut same, mut differ) = (Vec::new(), Vec::new());
    for (id, family, words) in LOADED {
        for r in results
            .iter()
            .filter(|r| r["id"] == id && matches!(r["status"].as_str(), Some("pass" | "warn")))
        {
            let Some(measured) = r["measured"].as_str() else {
                continue;
            };
            // `9.5.1 (wheel 9.5.1.17) from /path`: the wheel's version when said.
            let version = measured
                .split_once("(wheel ")
                .and_then(|(_, w)| w.split(')').next())
                .unwrap_or_else(|| measured.split_whitespace().next().unwrap_or(""))
                .to_string();
            let listed: Vec<&(String, String)> = components
                .iter()
                .filter(|(n, _)| n.starts_with(family))
                .collect();
            let hit = listed
                .iter()
                .find(|(_, v)| *v == version || v.starts_with(&format!("{version}.")));
            match hit {
                Some((n, v)) => same.push(format!("{words} {version} ({n} {v})")),
                None if listed.is_empty() => differ.push(format!(
                    "torch loaded {words} {version}, and the SBOM lists no {family} package"
                )),
                None => differ.push(format!(
                    "torch loaded {words} {version}, and the SBOM lists {}",
                    listed
                        .iter()
                        .map(|(n, v)| format!("{n} {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
    }
    if !differ.is_empty() {
        reason(
            Level::Fail,
            format!(
                "the SBOM does not list what torch loaded: {}",
                differ.join("; ")
            ),
            same.join(", "),
        )
    } else if same.is_empty() {
        reason(
            Level::Warn,
            "the signed verdict records no library torch loaded (a verify without GPUs): nothing to compare with the SBOM".to_string(),
            String::new(),
        )
    } else {
        let line = format!(
            "the SBOM lists every library torch loaded: {}",
            same.join(", ")
        );
        reason(Level::Pass, line, same.join(", "))
    }
}

/// The facts the newest trusted provenance records
/// (`internalParameters.gpuFit`), when one does.
pub fn from_provenance(accepted: &[crate::image::sign::rules::Accepted]) -> Option<ImageFacts> {
    accepted
        .iter()
        .filter(|a| a.predicate_type == crate::image::attest::SLSA_PROVENANCE_V1)
        .max_by(|a, b| a.time.cmp(&b.time))
        .and_then(|a| {
            let v = &a.statement["predicate"]["buildDefinition"]["internalParameters"]["gpuFit"];
            serde_json::from_value(v.clone()).ok()
        })
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
    fn the_sbom_rule_compares_what_torch_loaded_with_the_sbom() {
        use crate::gpus::fit::Level;
        use crate::image::attest::{CYCLONEDX_PREDICATE, VERIFY_PREDICATE};
        use crate::image::sign::rules::Accepted;
        let statement = |kind: &str, predicate: serde_json::Value| Accepted {
            manifest: "sha256:00".into(),
            predicate_type: kind.into(),
            key_id: "k".into(),
            time: Some("2026-12-07T00:00:00Z".into()),
            statement: serde_json::json!({ "predicate": predicate }),
        };
        let verdict = |cudnn: &str| {
            statement(
                VERIFY_PREDICATE,
                serde_json::json!({"results": [
                    {"id": "torch.cudnn_loaded", "status": "pass", "measured": format!("{cudnn} from /venv/nvidia/cudnn/lib/libcudnn.so.9")},
                    {"id": "torch.nccl_loaded", "status": "pass", "measured": "2.26.2 (wheel 2.26.2) from /venv/nvidia/nccl/lib/libnccl.so.2"},
                ]}),
            )
        };
        let sbom = statement(
            CYCLONEDX_PREDICATE,
            serde_json::json!({"components": [
                {"name": "nvidia-cudnn-cu12", "version": "9.5.1.17"},
                {"name": "nvidia-nccl-cu12", "version": "2.26.2"},
            ]}),
        );
        let r = sbom_reason(&[verdict("9.5.1"), sbom.clone()]);
        assert_eq!(r.level, Level::Pass, "{r:?}");
        assert_eq!(
            r.line,
            "the SBOM lists every library torch loaded: cuDNN 9.5.1 (nvidia-cudnn-cu12 9.5.1.17), NCCL 2.26.2 (nvidia-nccl-cu12 2.26.2)"
        );
        let r = sbom_reason(&[verdict("9.1.0"), sbom.clone()]);
        assert_eq!(r.level, Level::Fail);
        assert_eq!(
            r.line,
            "the SBOM does not list what torch loaded: torch loaded cuDNN 9.1.0, and the SBOM lists nvidia-cudnn-cu12 9.5.1.17"
        );
        let cpu = statement(
            VERIFY_PREDICATE,
            serde_json::json!({"results": [{"id": "torch.cudnn_loaded", "status": "skip"}]}),
        );
        assert_eq!(sbom_reason(&[cpu, sbom.clone()]).level, Level::Warn);
        assert_eq!(sbom_reason(&[sbom]).level, Level::Warn);
    }

    #[test]
    fn every_bundled_profile_has_its_facts() {
        let names: Vec<String> = bundled().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["cu124", "cu126", "cu128"]);
    }
}
