//! Spec validation: YAML text → [`ImageSpec`], or every problem at once.
//!
//! The validator walks the parsed YAML itself instead of deserializing with
//! serde, because serde stops at the first error and users should see all of
//! them. Each [`Problem`] names its field path (`torch.variant`, `pip[2]`), says
//! what is wrong and lists the valid choices. This module holds the field
//! checks; the walker that records problems and reports unknown keys is
//! [`super::walker`], the size limits checked first are [`super::limits`]. It
//! does no I/O besides checking that a user spec's `template` (and `lock`)
//! path stays in the spec's folder and exists.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_yaml::Value;

use super::compat::{self, TorchWheel};
use super::limits::{flow_depth_exceeds, long_strings};
pub use super::limits::{MAX_JOINED_BYTES, MAX_NESTING, MAX_STRING_BYTES};
use super::schema::{
    parse_pin, ImageRef, ImageSpec, LockSetting, PipPin, TorchSpec, UserSpec, SCHEMA_VERSION,
    TOP_LEVEL_KEYS, TORCH_KEYS, USER_KEYS,
};
pub use super::walker::{did_you_mean, Mention, Problem};

/// The program's name, as the schema-version message says it.
const PROGRAM: &str = env!("CARGO_PKG_NAME");
use super::url::{is_clean_url, mask_userinfo, urls_with_credentials, userinfo};
use super::walker::{kind, show, Walker};

fn is_name(s: &str, max: usize) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.len() <= max
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

/// Debian package names: lowercase alphanumerics and `+ - .`, at least two
/// characters, starting with an alphanumeric (Debian Policy §5.6.1).
fn is_apt_name(s: &str) -> bool {
    s.len() >= 2
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

/// Checks that the relative path `rel` stays in the spec's folder `dir`: no
/// `..` component, and, following symlinks, the file (or, while it does not
/// exist yet, its nearest existing parent) resolves inside `dir`. `Err` says
/// why not, to follow the quoted path.
fn inside_spec_dir(dir: &Path, rel: &Path) -> Result<(), String> {
    use std::path::Component;
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err("leaves the spec's folder (a `..` component or an absolute path)".to_string());
    }
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let root = dir.canonicalize().map_err(|e| {
        format!(
            "cannot be resolved: the spec's folder {}: {e}",
            dir.display()
        )
    })?;
    let target = dir.join(rel);
    let existing = target
        .ancestors()
        .find(|a| a.symlink_metadata().is_ok())
        .unwrap_or(dir);
    let resolved = existing
        .canonicalize()
        .map_err(|e| format!("cannot be resolved ({}: {e})", existing.display()))?;
    if resolved.starts_with(&root) {
        Ok(())
    } else {
        Err(format!(
            "resolves to {} (through a symlink), outside the spec's folder {}",
            resolved.display(),
            root.display()
        ))
    }
}

/// The top-level entries of a spec: key → value.
type Top<'a> = BTreeMap<String, &'a Value>;

/// Validates spec `text`. `spec_dir` is the folder of a user spec (used to
/// check that `template` exists); `None` for bundled specs, which may not name
/// a template.
pub fn validate(text: &str, spec_dir: Option<&Path>) -> Result<ImageSpec, Vec<Problem>> {
    let mut w = Walker::default();
    let Some(root) = parse(&mut w, text) else {
        return Err(w.problems);
    };
    let Some(top) = top_level(&mut w, &root) else {
        return Err(w.problems);
    };
    let (name, description) = check_name(&mut w, &top);
    let cuda = check_cuda(&mut w, &top);
    let base = check_base_image(&mut w, &top, cuda.as_deref());
    let (torch, wheel) = check_torch(&mut w, &top, cuda.as_deref());
    let python = check_python(&mut w, &top, wheel, base.as_ref());
    let pip = check_pip(&mut w, &top);
    let apt = check_apt(&mut w, &top);
    let user = check_user(&mut w, &top);
    let ports = check_ports(&mut w, &top);
    let labels = check_labels(&mut w, &top);
    let template = check_template(&mut w, &top, spec_dir);
    let lock = check_lock(&mut w, &top, spec_dir);

    let schema_version = top.get("schema_version").and_then(|v| v.as_u64());
    if !w.problems.is_empty() {
        // In the order of the schema's fields (unknown keys last), stable within a field.
        let rank = |p: &Problem| {
            let head = p.path.split(['.', '[']).next().unwrap_or("");
            TOP_LEVEL_KEYS
                .iter()
                .position(|k| *k == head)
                .unwrap_or(TOP_LEVEL_KEYS.len())
        };
        w.problems.sort_by_key(rank);
        return Err(w.problems);
    }
    match (schema_version, name, base, cuda, python, torch, user) {
        (
            Some(schema_version),
            Some(name),
            Some(base_image),
            Some(cuda),
            Some(python),
            Some(torch),
            Some(user),
        ) => Ok(ImageSpec {
            schema_version,
            name,
            description,
            base_image,
            cuda,
            python,
            torch,
            pip,
            apt,
            user,
            ports,
            labels,
            template,
            lock,
        }),
        // Every None above was recorded as a problem, so this is unreachable in
        // practice; report it rather than panic.
        _ => Err(vec![Problem {
            path: "(spec)".to_string(),
            message: "incomplete spec".to_string(),
            valid: None,
            mention: None,
        }]),
    }
}

/// The YAML of `text`, unless its brackets nest too deep or it does not parse
/// (`None`: the problem is recorded).
fn parse(w: &mut Walker, text: &str) -> Option<Value> {
    if let Some((line, column)) = flow_depth_exceeds(text, MAX_NESTING) {
        w.problem(
            &format!("(line {line} column {column})"),
            format!("brackets nest deeper than {MAX_NESTING} levels; a spec needs two or three"),
            None,
        );
        return None;
    }
    match serde_yaml::from_str(text) {
        Ok(v) => Some(v),
        Err(e) => {
            let at = e
                .location()
                .map(|l| format!("line {} column {}", l.line(), l.column()))
                .unwrap_or_else(|| "the file".to_string());
            w.problem(&format!("({at})"), format!("not valid YAML: {e}"), None);
            None
        }
    }
}

/// The top-level mapping (unknown and missing keys recorded), once
/// `schema_version` is one this program reads and no string is too long;
/// `None` when the fields cannot be checked.
fn top_level<'a>(w: &mut Walker, root: &'a Value) -> Option<Top<'a>> {
    let required = [
        "schema_version",
        "name",
        "base_image",
        "cuda",
        "python",
        "torch",
        "pip",
        "apt",
        "user",
        "ports",
    ];

    // The schema version decides how to read the rest: check it alone first.
    if let Value::Mapping(m) = root {
        match m.get("schema_version") {
            None => {}
            Some(Value::Number(n)) if n.as_u64() == Some(SCHEMA_VERSION) => {}
            Some(other) => {
                let shown = match other {
                    Value::Number(n) => n.to_string(),
                    Value::String(s) => format!("'{s}'"),
                    v => kind(v).to_string(),
                };
                w.problem(
                    "schema_version",
                    // The program's name, not a command: "this imgctl reads version 1".
                    format!("unknown schema version {shown}; this {PROGRAM} reads version {SCHEMA_VERSION} (a newer {PROGRAM} may read this spec)"),
                    Some(SCHEMA_VERSION.to_string()),
                );
                return None;
            }
        }
    }
    long_strings(w, root, "");
    if !w.problems.is_empty() {
        // The other checks would quote the long values back.
        return None;
    }
    w.mapping(root, "", TOP_LEVEL_KEYS, &required)
}

/// `name`, a profile name, and `description`, one line (empty when absent).
fn check_name(w: &mut Walker, top: &Top) -> (Option<String>, String) {
    let name = w.string(top, "name", "");
    if let Some(n) = &name {
        if !is_name(n, 63) {
            w.problem(
                "name",
                format!(
                    "'{n}' is not a profile name (lowercase letters, digits, . _ -; at most 63)"
                ),
                None,
            );
        }
    }
    let description = w.string(top, "description", "").unwrap_or_default();
    if description.contains('\n') {
        w.problem("description", "must be one line", None);
    }
    (name, description)
}

/// `cuda`, a full toolkit version of the compatibility table.
fn check_cuda(w: &mut Walker, top: &Top) -> Option<String> {
    let cuda = w.string(top, "cuda", "");
    let known_cuda = compat::toolkit_versions().join(", ");
    if let Some(c) = &cuda {
        if compat::toolkit(c).is_none() {
            let hint = compat::toolkit_versions()
                .into_iter()
                .rfind(|t| compat::major_minor(t) == *c);
            let message = match hint {
                Some(full) => {
                    format!("'{c}' is not a full toolkit version; did you mean `{full}`?")
                }
                None => format!("unknown CUDA toolkit '{c}'"),
            };
            w.problem("cuda", message, Some(known_cuda.clone()));
        }
    }
    cuda
}

/// `base_image`, an image reference; an `nvidia/cuda` tag must be of `cuda`.
fn check_base_image(w: &mut Walker, top: &Top, cuda: Option<&str>) -> Option<ImageRef> {
    let base = w
        .string(top, "base_image", "")
        .and_then(|b| match ImageRef::parse(&b) {
            Ok(r) => Some(r),
            Err(e) => {
                w.problem("base_image", e, None);
                None
            }
        });
    if let (Some(b), Some(c)) = (&base, cuda) {
        if b.name == "nvidia/cuda" && !b.tag.starts_with(&format!("{c}-")) {
            let tag_cuda = b.tag.split('-').next().unwrap_or("");
            w.problem(
                "base_image",
                format!(
                    "tag '{}' is CUDA {tag_cuda} but `cuda` says {c}; make them agree",
                    b.tag
                ),
                None,
            );
        }
    }
    base
}

/// The `torch` mapping: a wheel of the compatibility table, an index that
/// serves it, and a wheel that a base of `cuda` can run. Returns the spec's
/// torch and the wheel, each when found.
fn check_torch(
    w: &mut Walker,
    top: &Top,
    cuda: Option<&str>,
) -> (Option<TorchSpec>, Option<&'static TorchWheel>) {
    let mut torch = None;
    let mut wheel = None;
    if let Some(t) = top.get("torch") {
        if let Some(tm) = w.mapping(t, "torch", TORCH_KEYS, TORCH_KEYS) {
            let version = w.string(&tm, "version", "torch");
            let variant = w.string(&tm, "variant", "torch");
            let index = w.string(&tm, "index", "torch");
            if let Some(v) = &version {
                if compat::variants(v).is_empty() {
                    w.problem(
                        "torch.version",
                        format!("unknown torch version '{v}'"),
                        Some(compat::torch_versions().join(", ")),
                    );
                } else if let Some(var) = &variant {
                    match compat::lookup(v, var) {
                        Some(found) => wheel = Some(found),
                        None => {
                            let extra = if v == "2.7.0" && var == "cu124" {
                                "; torch 2.7.0 was never built for CUDA 12.4: use cu126, which runs on a 12.4 base by minor-version compatibility"
                            } else {
                                ""
                            };
                            w.problem(
                                "torch.variant",
                                format!("no torch {v} wheel for {var}{extra}"),
                                Some(compat::variants(v).join(", ")),
                            );
                        }
                    }
                }
            }
            if let Some(i) = &index {
                check_torch_index(w, i, wheel);
            }
            if let (Some(version), Some(variant), Some(index)) = (version, variant, index) {
                torch = Some(TorchSpec {
                    version,
                    variant,
                    index: index.trim_end_matches('/').to_string(),
                });
            }
        }
    }
    if let (Some(wh), Some(c)) = (wheel, cuda) {
        if compat::toolkit(c).is_some() && compat::fit(wh.cuda, c) == compat::Fit::Incompatible {
            w.problem(
                "torch.variant",
                format!(
                    "the {} wheel needs CUDA {} drivers; a CUDA {c} base cannot run it",
                    wh.variant, wh.cuda
                ),
                Some(
                    compat::variants(wh.torch)
                        .into_iter()
                        .filter(|v| {
                            compat::lookup(wh.torch, v).is_some_and(|x| {
                                compat::fit(x.cuda, c) != compat::Fit::Incompatible
                            })
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
            );
        }
    }
    (torch, wheel)
}

/// `torch.index` `i`: an http(s) URL without credentials that serves `wheel`
/// (when the wheel is known).
fn check_torch_index(w: &mut Walker, i: &str, wheel: Option<&TorchWheel>) {
    if !is_clean_url(i) {
        let i = mask_userinfo(i);
        w.problem("torch.index", format!("'{i}' is not an http(s) URL"), None);
    } else if userinfo(i).is_some() {
        w.problem(
            "torch.index",
            format!("'{}' contains credentials (user or password before '@'), which would be stored in the image's history, labels and lock; use an index that needs none (a mirror or proxy on your network)", mask_userinfo(i)),
            None,
        );
    } else if let Some(wh) = wheel {
        let i = i.trim_end_matches('/');
        let expected = compat::default_index(wh);
        let on_pypi = i == compat::PYPI_INDEX;
        let on_pytorch = i.starts_with(compat::PYTORCH_INDEX_ROOT);
        if on_pypi && !wh.pypi_default {
            w.problem(
                "torch.index",
                format!(
                    "PyPI serves torch {}'s {} wheel, not {}; use {expected}",
                    wh.torch,
                    compat::pypi_default(wh.torch).map_or("?", |d| d.variant),
                    wh.variant
                ),
                Some(format!("{expected}, or a mirror of it")),
            );
        } else if on_pytorch && i != format!("{}/{}", compat::PYTORCH_INDEX_ROOT, wh.variant) {
            w.problem(
                "torch.index",
                format!("'{i}' does not serve the {} wheel", wh.variant),
                Some(format!("{expected}, or a mirror of it")),
            );
        }
    }
}

/// `python`, a Python minor version that `wheel` is published for and that
/// is the python3 of `base`'s distro (when known).
fn check_python(
    w: &mut Walker,
    top: &Top,
    wheel: Option<&TorchWheel>,
    base: Option<&ImageRef>,
) -> Option<String> {
    let python = w.string(top, "python", "");
    if let Some(p) = &python {
        let ok = p.split_once('.').is_some_and(|(a, b)| {
            a == "3" && !b.is_empty() && b.chars().all(|c| c.is_ascii_digit())
        });
        if !ok {
            w.problem(
                "python",
                format!("'{p}' is not a Python minor version like 3.10"),
                None,
            );
        } else {
            if let Some(wh) = wheel {
                let k = compat::version_key(p);
                if k < compat::version_key(wh.python_min) || k > compat::version_key(wh.python_max)
                {
                    w.problem(
                        "python",
                        format!("torch {} publishes no wheel for Python {p}", wh.torch),
                        Some(format!("{} to {}", wh.python_min, wh.python_max)),
                    );
                }
            }
            if let Some((distro, py)) = base.and_then(|b| compat::distro_python(&b.tag)) {
                if py != p {
                    w.problem(
                        "python",
                        format!("the base is {distro}, whose python3 is {py}; the image builds its venv from the distro python3"),
                        Some(py.to_string()),
                    );
                }
            }
        }
    }
    python
}

/// `pip`: `name==version` pins, each package once, torch not among them.
fn check_pip(w: &mut Walker, top: &Top) -> Vec<PipPin> {
    let mut pip = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, item) in w.list(top, "pip", "").into_iter().enumerate() {
        let field = format!("pip[{i}]");
        let Some(s) = item.as_str() else {
            w.problem(
                &field,
                format!("expected a string like name==1.2.3, found {}", kind(item)),
                None,
            );
            continue;
        };
        match parse_pin(s) {
            Ok(pin) => {
                let n = pin.normalized_name();
                if n == "torch" {
                    w.problem(
                        &field,
                        "torch is chosen by the `torch` mapping, not listed under pip",
                        None,
                    );
                } else if !seen.insert(n.clone()) {
                    w.problem(&field, format!("'{n}' is listed twice"), None);
                } else {
                    pip.push(pin);
                }
            }
            Err(e) => w.problem(&field, e, None),
        }
    }
    pip
}

/// `apt`: Debian package names, each once, that fit on one Dockerfile line.
fn check_apt(w: &mut Walker, top: &Top) -> Vec<String> {
    let mut apt = Vec::new();
    for (i, item) in w.list(top, "apt", "").into_iter().enumerate() {
        let field = format!("apt[{i}]");
        match item.as_str() {
            Some(s) if is_apt_name(s) => {
                if apt.iter().any(|a| a == s) {
                    w.problem(&field, format!("'{s}' is listed twice"), None);
                } else {
                    apt.push(s.to_string());
                }
            }
            Some(s) => w.problem(&field, format!("'{s}' is not a Debian package name (lowercase letters, digits, + - .; versions are the distro's)"), None),
            None => w.problem(&field, format!("expected a package name, found {}", kind(item)), None),
        }
    }

    let apt_line: usize = apt.iter().map(|a| a.len() + 1).sum();
    if apt_line > MAX_JOINED_BYTES {
        w.problem(
            "apt",
            format!("the package names take {apt_line} bytes on one Dockerfile line; at most {MAX_JOINED_BYTES} (Docker reads a line of at most 64 KiB)"),
            None,
        );
    }
    apt
}

/// The `user` mapping: a login name other than root.
fn check_user(w: &mut Walker, top: &Top) -> Option<UserSpec> {
    let mut user = None;
    if let Some(u) = top.get("user") {
        if let Some(um) = w.mapping(u, "user", USER_KEYS, USER_KEYS) {
            if let Some(n) = w.string(&um, "name", "user") {
                let ok = n.len() <= 32
                    && n.chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                    && n.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c));
                if !ok {
                    w.problem("user.name", format!("'{n}' is not a login name (lowercase letters, digits, _ -; at most 32)"), None);
                } else if n == "root" {
                    w.problem("user.name", "the image's user must not be root", None);
                } else {
                    user = Some(UserSpec { name: n });
                }
            }
        }
    }
    user
}

/// `ports`: port numbers, each once, that fit on one Dockerfile line.
fn check_ports(w: &mut Walker, top: &Top) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::new();
    for (i, item) in w.list(top, "ports", "").into_iter().enumerate() {
        let field = format!("ports[{i}]");
        match item.as_u64() {
            Some(p) if (1..=65535).contains(&p) => {
                let p = p as u16;
                if ports.contains(&p) {
                    w.problem(&field, format!("{p} is listed twice"), None);
                } else {
                    ports.push(p);
                }
            }
            _ => w.problem(
                &field,
                format!("expected a port number 1-65535, found {}", show(item)),
                None,
            ),
        }
    }

    let ports_line: usize = ports.iter().map(|p| p.to_string().len() + 1).sum();
    if ports_line > MAX_JOINED_BYTES {
        w.problem(
            "ports",
            format!("{} ports take {ports_line} bytes on one Dockerfile line; at most {MAX_JOINED_BYTES} (Docker reads a line of at most 64 KiB)", ports.len()),
            None,
        );
    }
    ports
}

/// The `labels` mapping: reverse-DNS keys, one-line string values without
/// credentials in a URL.
fn check_labels(w: &mut Walker, top: &Top) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    match top.get("labels") {
        None => {}
        Some(Value::Mapping(m)) => {
            for (k, v) in m {
                let Some(key) = k.as_str() else {
                    w.problem(
                        "labels",
                        format!("label keys must be strings, found {}", kind(k)),
                        None,
                    );
                    continue;
                };
                let field = format!("labels.{key}");
                let key_ok = key
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric())
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
                if !key_ok {
                    w.problem(&field, "label keys are letters, digits and . _ - / (reverse-DNS, e.g. org.example.team)", None);
                    continue;
                }
                match v {
                    Value::String(s) if !urls_with_credentials(s).is_empty() => w.problem(
                        &field,
                        format!(
                            "'{}' contains credentials (user or password before '@'), which every copy of the image would carry; write the URL without them",
                            urls_with_credentials(s).join(" ")
                        ),
                        None,
                    ),
                    Value::String(s) if !s.contains('\n') => {
                        labels.insert(key.to_string(), s.clone());
                    }
                    Value::String(_) => w.problem(&field, "label values must be one line", None),
                    other => w.problem(
                        &field,
                        format!("expected a string, found {}", kind(other)),
                        None,
                    ),
                }
            }
        }
        Some(other) => w.problem(
            "labels",
            format!("expected a mapping, found {}", kind(other)),
            None,
        ),
    }
    labels
}

/// `template`: only in a spec file (`spec_dir`), a relative path to a file
/// in the spec's folder or below.
fn check_template(w: &mut Walker, top: &Top, spec_dir: Option<&Path>) -> Option<String> {
    let template = w.string(top, "template", "");
    if let Some(t) = &template {
        match spec_dir {
            None => w.problem_mentioning(
                "template",
                "bundled specs use the bundled template; only a spec file may name its own",
                None,
                Mention::TemplateNeedsSpecFile,
            ),
            Some(dir) => {
                let p = Path::new(t);
                if t.chars().any(char::is_control) {
                    w.problem("template", format!("{t:?} contains a control character (a newline would start a Dockerfile instruction)"), None);
                } else if p.is_absolute() || t.is_empty() {
                    w.problem(
                        "template",
                        format!("'{t}' must be a path relative to the spec file"),
                        None,
                    );
                } else if let Err(e) = inside_spec_dir(dir, p) {
                    w.problem(
                        "template",
                        format!("'{t}' {e}; keep it in the spec's folder or below"),
                        None,
                    );
                } else if dir.join(p).is_dir() {
                    w.problem(
                        "template",
                        format!(
                            "'{t}' is a directory, not a template file ({})",
                            dir.join(p).display()
                        ),
                        None,
                    );
                } else if !dir.join(p).is_file() {
                    w.problem(
                        "template",
                        format!(
                            "'{t}' does not exist next to the spec (looked for {})",
                            dir.join(p).display()
                        ),
                        None,
                    );
                }
            }
        }
    }
    template
}

/// `lock`: true/absent (the default file), false (none), or, only in a spec
/// file (`spec_dir`), a relative `.lock` path in the spec's folder or below.
fn check_lock(w: &mut Walker, top: &Top, spec_dir: Option<&Path>) -> LockSetting {
    match top.get("lock") {
        None | Some(Value::Bool(true)) => LockSetting::Default,
        Some(Value::Bool(false)) => LockSetting::Disabled,
        Some(Value::String(l)) => {
            let p = Path::new(l);
            if spec_dir.is_none() {
                w.problem_mentioning(
                    "lock",
                    "bundled specs use their bundled lock (images/<name>.lock); only a spec file may name its own",
                    None,
                    Mention::LockNeedsSpecFile,
                );
            } else if l.chars().any(char::is_control) {
                w.problem(
                    "lock",
                    format!("{l:?} contains a control character (a newline would start a Dockerfile instruction)"),
                    Some("false, true, or a relative path like my.lock".to_string()),
                );
            } else if l.is_empty() || p.is_absolute() {
                w.problem(
                    "lock",
                    format!("'{l}' must be a path relative to the spec file"),
                    Some("false, true, or a relative path like my.lock".to_string()),
                );
            } else if let Err(e) = spec_dir.map_or(Ok(()), |dir| inside_spec_dir(dir, p)) {
                w.problem(
                    "lock",
                    format!("'{l}' {e}; keep it in the spec's folder or below"),
                    Some("false, true, or a relative path like my.lock".to_string()),
                );
            } else if !l.ends_with(".lock") {
                w.problem_mentioning(
                    "lock",
                    format!("'{l}' does not end in .lock (a lock file is written by the lock command, not a requirements file)"),
                    Some("false, true, or a relative path like my.lock".to_string()),
                    Mention::LockNotLockFile {
                        value: crate::error::escape_controls(l).into_owned(),
                    },
                );
            }
            // A missing file is no problem here: `imgctl lock` creates it.
            LockSetting::Path(l.clone())
        }
        Some(other) => {
            w.problem(
                "lock",
                format!("expected true, false or a path, found {}", kind(other)),
                Some("false, true, or a relative path like my.lock".to_string()),
            );
            LockSetting::Default
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins() {
        assert_eq!(parse_pin("diffusers==0.33.1").unwrap().version, "0.33.1");
        assert_eq!(
            parse_pin("uvicorn[standard]==0.30.0").unwrap().name,
            "uvicorn[standard]"
        );
        assert!(parse_pin("diffusers").unwrap_err().contains("not pinned"));
        assert!(parse_pin("diffusers>=0.33").unwrap_err().contains("(>=)"));
        assert!(parse_pin("diffusers==0.*").is_err());
        assert!(parse_pin("diffusers==0.33; rm -rf /").is_err());
    }

    #[test]
    fn typos() {
        assert_eq!(did_you_mean("tempalte", TOP_LEVEL_KEYS), Some("template"));
        assert_eq!(did_you_mean("zzz", TOP_LEVEL_KEYS), None);
    }

    #[test]
    fn bundled_specs_are_valid() {
        for (name, text) in crate::image::specs::bundled() {
            let spec = validate(text, None).unwrap_or_else(|p| panic!("{name}: {p:?}"));
            assert_eq!(spec.name, name);
        }
    }
}
