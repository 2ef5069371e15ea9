//! Whose a workstation is (#50 H2). A Docker socket is often shared by
//! everyone on a GPU box, so `up` labels each workstation with the user who
//! started it, and `ps`, `down` and `logs` act on the caller's own unless
//! told otherwise (`--all-users`). A workstation of an imgctl from before
//! the labels has no owner: it is listed as "owner unknown", may be named,
//! and is never swept up by `down --all`.
//!
//! The labels are a courtesy between the users of one engine, not a
//! boundary: anyone who may use the socket may also run `docker rm`.
use crate::docker::listing::{LABEL_OWNER, LABEL_OWNER_UID};
use crate::docker::workstation::Listed;

/// A user: uid and login name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The numeric user id.
    pub uid: u32,
    /// The login name (`uid N` when the user database has none).
    pub name: String,
}

impl Owner {
    /// The user running imgctl: the real uid, or under `sudo` (uid 0 with
    /// `SUDO_UID` set) the user who ran sudo, so that `sudo imgctl down
    /// --all` removes that user's workstations, not everyone's.
    pub fn me() -> Owner {
        let real = crate::sys::process::real_uid();
        let uid = match std::env::var(crate::env_vars::SUDO_UID)
            .ok()
            .and_then(|u| u.parse().ok())
        {
            Some(u) if real == 0 => u,
            _ => real,
        };
        Owner {
            uid,
            name: crate::sys::process::login_name(uid).unwrap_or_else(|| format!("uid {uid}")),
        }
    }

    /// `alice (uid 1001)`.
    pub fn describe(&self) -> String {
        format!("{} (uid {})", self.name, self.uid)
    }
}

/// The labels that name `owner` on a workstation and its home volume.
pub fn labels(owner: &Owner) -> std::collections::HashMap<String, String> {
    std::collections::HashMap::from([
        (LABEL_OWNER_UID.to_string(), owner.uid.to_string()),
        (LABEL_OWNER.to_string(), owner.name.clone()),
    ])
}

/// Whose a listed workstation is, seen from `me`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whose {
    /// The caller's.
    Mine,
    /// Another user's.
    Other(Owner),
    /// Started by an imgctl that did not label its owner.
    Unknown,
}

impl Whose {
    /// Of `w`, seen from `me`.
    pub fn of(w: &Listed, me: &Owner) -> Whose {
        match w.owner_uid {
            Some(uid) if uid == me.uid => Whose::Mine,
            Some(uid) => Whose::Other(Owner {
                uid,
                name: w.owner.clone().unwrap_or_else(|| format!("uid {uid}")),
            }),
            None => Whose::Unknown,
        }
    }

    /// The OWNER column's cell (`you`, `alice (uid 1001)`, `owner unknown`).
    pub fn cell(&self) -> String {
        match self {
            Whose::Mine => "you".into(),
            Whose::Other(o) => o.describe(),
            Whose::Unknown => "owner unknown".into(),
        }
    }
}

/// Which workstations a listing shows or `--all` acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The caller's, and those of unknown owner (listed, never swept).
    Mine,
    /// Everyone's (`--all-users`).
    AllUsers,
}

/// Whether `ps` shows `w` in `scope`.
pub fn listed_in(whose: &Whose, scope: Scope) -> bool {
    scope == Scope::AllUsers || !matches!(whose, Whose::Other(_))
}

/// Whether `down --all` removes `w` in `scope`: never one of unknown
/// owner, another user's only with `--all-users`.
pub fn swept_by_all(whose: &Whose, scope: Scope) -> bool {
    match whose {
        Whose::Mine => true,
        Whose::Other(_) => scope == Scope::AllUsers,
        Whose::Unknown => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(uid: Option<u32>, name: Option<&str>) -> Listed {
        Listed {
            name: "ws".into(),
            id: "id".into(),
            image: "img".into(),
            state: "running".into(),
            status: "Up".into(),
            gpus: "none".into(),
            gpu_api: None,
            workspace: None,
            userns: None,
            jupyter: None,
            ssh: None,
            tensorboard: None,
            user: None,
            bound: vec![],
            token: None,
            created: 0,
            home_volume: None,
            ssh_alias: None,
            ssh_identity: None,
            owner_uid: uid,
            owner: name.map(str::to_string),
            stopped_why: None,
        }
    }

    #[test]
    fn down_all_sweeps_only_the_caller_s_and_never_an_unknown_owner_s() {
        let me = Owner {
            uid: 1000,
            name: "me".into(),
        };
        let mine = Whose::of(&listed(Some(1000), Some("me")), &me);
        let alice = Whose::of(&listed(Some(1001), Some("alice")), &me);
        let old = Whose::of(&listed(None, None), &me);
        assert_eq!(mine, Whose::Mine);
        assert_eq!(alice.cell(), "alice (uid 1001)");
        assert_eq!(old.cell(), "owner unknown");
        assert!(swept_by_all(&mine, Scope::Mine));
        assert!(!swept_by_all(&alice, Scope::Mine));
        assert!(swept_by_all(&alice, Scope::AllUsers));
        assert!(!swept_by_all(&old, Scope::Mine) && !swept_by_all(&old, Scope::AllUsers));
        assert!(listed_in(&old, Scope::Mine) && !listed_in(&alice, Scope::Mine));
        assert!(listed_in(&alice, Scope::AllUsers));
    }

    #[test]
    fn i_am_the_real_user_and_root_is_named() {
        let me = Owner::me();
        let real = crate::sys::process::real_uid();
        if real != 0 || std::env::var_os("SUDO_UID").is_none() {
            assert_eq!(me.uid, real);
        }
        assert_eq!(crate::sys::process::login_name(0).as_deref(), Some("root"));
    }
}
