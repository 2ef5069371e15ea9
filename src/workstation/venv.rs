//! The user's `~/.venv` across an image upgrade (#53, "an image upgrade
//! keeps everything"). The home volume keeps the venv, but a venv belongs to
//! the Python that made it: the image's entrypoint moves one that another
//! Python made (or that no longer runs) to `~/.venv.old-SECONDS` and makes a
//! new one. What the user had installed is then in the old one only. `up`
//! reads both venvs' `*.dist-info` folders (the record pip keeps of every
//! package installed, readable without running a Python) and the command
//! layer names what is missing and the one command that installs it again.
use std::time::Duration;

use crate::docker::workstation as ws;

/// A shell script run inside (`exec` runs as the container's user, root:
/// the entrypoint drops to the image's user itself), given that user as
/// `$1`, whose home it reads. Nothing without an old venv; else `image X.Y`
/// (the image's Python, as the entrypoint asks it), `old NAME` (the newest
/// `~/.venv.old-*`), `oldvenv X.Y.Z` (its Python), `oldpkg D` and `pkg D`
/// for each `*.dist-info` folder D of the old and the current venv.
const PROBE: &str = r#"home=$(getent passwd "$1" 2>/dev/null | cut -d: -f6)
[ -n "$home" ] || home="$HOME"
old=$(ls -d "$home"/.venv.old-* 2>/dev/null | sort | tail -n 1)
[ -n "$old" ] && [ -d "$old" ] || exit 0
echo "old ${old##*/}"
py=/opt/venv/bin/python
[ -x "$py" ] || py=python3
"$py" -c 'import sys; print("image %d.%d" % sys.version_info[:2])'
sed -n 's/^version\(_info\)\{0,1\} *= *//p' "$old/pyvenv.cfg" 2>/dev/null | head -n 1 | sed 's/^/oldvenv /'
for d in "$old"/lib/python*/site-packages/*.dist-info "$old"/lib/python*/site-packages/*.egg-info; do
  [ -e "$d" ] && echo "oldpkg ${d##*/}"
done
for d in "$home"/.venv/lib/python*/site-packages/*.dist-info "$home"/.venv/lib/python*/site-packages/*.egg-info; do
  [ -e "$d" ] && echo "pkg ${d##*/}"
done
exit 0"#;

/// Packages the user installed into a venv the entrypoint moved aside, and
/// that the new `~/.venv` does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftBehind {
    /// The old venv's folder in the home (`.venv.old-1733500000`).
    pub old: String,
    /// The Python that made it (`3.9`; `?` when its pyvenv.cfg says none).
    pub made_by: String,
    /// The image's Python (`3.11`; `?` when unknown).
    pub image: String,
    /// What it held that the new venv lacks (`six==1.16.0`), pip's own left
    /// out.
    pub packages: Vec<String>,
}

/// What the probe's output `text` says: None when no venv was moved aside
/// or the new one has everything the old one held.
pub fn left_behind(text: &str) -> Option<LeftBehind> {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_string())
    };
    let old = field("old ").filter(|o| o.starts_with(".venv.old-") && safe(o))?;
    let made_by = field("oldvenv ")
        .and_then(|v| minor(&v))
        .unwrap_or_else(|| "?".into());
    let image = field("image ")
        .and_then(|v| minor(&v))
        .unwrap_or_else(|| "?".into());
    let installed = |prefix: &str| -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|d| record_name(d.trim()))
            .filter_map(|d| d.rsplit_once('-'))
            .filter(|(name, version)| safe(name) && safe(version))
            .map(|(name, version)| (name.to_string(), version.to_string()))
            .collect()
    };
    let have: Vec<String> = installed("pkg ")
        .into_iter()
        .map(|(name, _)| normal(&name))
        .collect();
    let mut packages: Vec<String> = installed("oldpkg ")
        .into_iter()
        .filter(|(name, _)| !matches!(normal(name).as_str(), "pip" | "setuptools" | "wheel"))
        .filter(|(name, _)| !have.contains(&normal(name)))
        .map(|(name, version)| format!("{name}=={version}"))
        .collect();
    packages.sort();
    (!packages.is_empty()).then_some(LeftBehind {
        old,
        made_by,
        image,
        packages,
    })
}

/// `NAME-VERSION` of a package's record in site-packages: pip's
/// `NAME-VERSION.dist-info`, or the `NAME-VERSION-pyX.Y.egg-info` that a
/// legacy `setup.py install` leaves (a project without a pyproject.toml).
fn record_name(entry: &str) -> Option<&str> {
    if let Some(d) = entry.strip_suffix(".dist-info") {
        return Some(d);
    }
    let egg = entry.strip_suffix(".egg-info")?;
    Some(match egg.rsplit_once("-py") {
        Some((d, py)) if py.bytes().all(|b| b.is_ascii_digit() || b == b'.') => d,
        _ => egg,
    })
}

/// A distribution name as pip compares them (PEP 503: case and `-_.` runs
/// alike).
fn normal(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

/// `3.11` of `3.11.2` (or of `3.11.2.final.0`).
fn minor(version: &str) -> Option<String> {
    let mut parts = version.split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    let number = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    (number(major) && number(minor)).then(|| format!("{major}.{minor}"))
}

/// A name or version that may stand in a shell command unquoted (a folder
/// name in the home is the user's to choose: anything else is left out).
fn safe(word: &str) -> bool {
    !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'!' | b'-'))
}

/// Runs the probe in the running workstation `id` over the home of the
/// image's `user`. None: nothing left behind, or the probe could not tell
/// (it never fails `up`).
pub async fn check(docker: &bollard::Docker, id: &str, user: &str) -> Option<LeftBehind> {
    let argv = ["sh", "-c", PROBE, "sh", user].map(String::from).to_vec();
    let out = ws::exec(docker, id, argv, Vec::new(), Duration::from_secs(30))
        .await
        .ok()?;
    left_behind(&out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_old_venv_held_and_the_new_lacks_is_named() {
        let text = "old .venv.old-1733500000\nimage 3.11\noldvenv 3.9.7\n\
                    oldpkg six-1.16.0.dist-info\noldpkg pip-23.0.1.dist-info\n\
                    oldpkg typing_extensions-4.12.2.dist-info\noldpkg Requests-2.31.0.dist-info\n\
                    oldpkg evil;rm -rf ~-1.0.dist-info\npkg requests-2.32.3.dist-info\n";
        assert_eq!(
            left_behind(text),
            Some(LeftBehind {
                old: ".venv.old-1733500000".into(),
                made_by: "3.9".into(),
                image: "3.11".into(),
                packages: vec!["six==1.16.0".into(), "typing_extensions==4.12.2".into()],
            })
        );
        // A legacy setup.py install leaves an .egg-info record.
        assert_eq!(
            left_behind("old .venv.old-1\noldvenv 3.9.7\nimage 3.11\noldpkg imgctl_user_pkg-0.1-py3.9.egg-info\n")
                .map(|l| l.packages),
            Some(vec!["imgctl_user_pkg==0.1".to_string()])
        );
        // Everything installed again, no old venv, or an odd folder name.
        assert_eq!(
            left_behind("old .venv.old-1\nimage 3.11\noldpkg six-1.16.0.dist-info\npkg six-1.17.0.dist-info\n"),
            None
        );
        assert_eq!(left_behind(""), None);
        assert_eq!(
            left_behind("old .venv.old-1;x\noldpkg six-1.16.0.dist-info\n"),
            None
        );
        // virtualenv's spelling; no version at all.
        assert_eq!(
            left_behind("old .venv.old-1\noldvenv 3.12.1.final.0\noldpkg a-1.dist-info\n")
                .map(|l| (l.made_by, l.image)),
            Some(("3.12".into(), "?".into()))
        );
    }
}
