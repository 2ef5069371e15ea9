//! The fleet's tree: nodes in groups, each group led by its lowest rank.
//! Rank 0 times the links of its own group and of the other groups'
//! leaders; each leader times its own members' links at the same time as
//! the others and sends rank 0 one summary ([`super::tree`]). With groups
//! of `g`, rank 0 times about `g + N/g` links instead of `N - 1`.
//!
//! A node's group is its leaf switch when the scheduler says where it sits
//! (`SLURM_TOPOLOGY_ADDR`, `s0.s3.node17` under the switch `s0.s3`), so a
//! leader's probes stay under one switch; without it, ranks in order.
//! Groups larger than `g` are cut into pieces of `g`. Pure: no sockets.
//!
//! Part: the verify wing (`docs/architecture.md`).
use std::collections::BTreeMap;

/// One group of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Where it sits: the switch (`s0.s3`), or `ranks 8-15`.
    pub key: String,
    /// Its lowest rank, which times the others' links.
    pub leader: usize,
    /// The other ranks of the group, in order.
    pub members: Vec<usize>,
}

/// The switch above a node from its `SLURM_TOPOLOGY_ADDR`: everything before
/// the last dot (`s0.s3.node17` → `s0.s3`); none for a bare name.
pub fn switch_of(addr: &str) -> Option<&str> {
    addr.rsplit_once('.')
        .map(|(s, _)| s)
        .filter(|s| !s.is_empty())
}

/// The groups of `nodes` (rank, topology address), at most `size` ranks each
/// (`size` 0 or 1: every node a group of its own, so rank 0 times every
/// link itself). Rank 0, the lowest rank, always leads its group.
pub fn groups(nodes: &[(usize, Option<String>)], size: usize) -> Vec<Group> {
    let size = size.max(1);
    // Nodes under one switch together; nodes with no switch in rank order.
    let mut by_switch: BTreeMap<Option<String>, Vec<usize>> = BTreeMap::new();
    for (rank, topo) in nodes {
        let switch = topo.as_deref().and_then(switch_of).map(str::to_string);
        by_switch.entry(switch).or_default().push(*rank);
    }
    let mut out = Vec::new();
    for (switch, mut ranks) in by_switch {
        ranks.sort_unstable();
        ranks.dedup();
        let pieces = ranks.len().div_ceil(size);
        for (i, chunk) in ranks.chunks(size).enumerate() {
            let key = match (&switch, pieces) {
                (Some(s), 1) => s.clone(),
                (Some(s), _) => format!("{s} (part {} of {pieces})", i + 1),
                (None, _) if chunk.len() == 1 => format!("rank {}", chunk[0]),
                (None, _) => format!("ranks {}-{}", chunk[0], chunk[chunk.len() - 1]),
            };
            out.push(Group {
                key,
                leader: chunk[0],
                members: chunk[1..].to_vec(),
            });
        }
    }
    // Rank 0's group first, then by leader.
    out.sort_by_key(|g| g.leader);
    out
}

/// The ranks rank 0 times itself: its own group's members and the other
/// groups' leaders.
pub fn direct(groups: &[Group]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for g in groups {
        if g.leader == 0 {
            out.extend(&g.members);
        } else {
            out.push(g.leader);
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(n: usize) -> Vec<(usize, Option<String>)> {
        (0..n).map(|r| (r, None)).collect()
    }

    #[test]
    fn sixty_four_ranks_make_eight_groups_of_eight_and_rank_0_times_fourteen_links() {
        let g = groups(&plain(64), 8);
        assert_eq!(g.len(), 8);
        assert_eq!(g[0].leader, 0);
        assert_eq!(g[0].members, (1..8).collect::<Vec<_>>());
        assert_eq!(g[7].key, "ranks 56-63");
        assert_eq!(g[7].leader, 56);
        assert!(g.iter().all(|g| g.members.len() == 7));
        let d = direct(&g);
        assert_eq!(d.len(), 7 + 7);
        assert!(d.contains(&8) && d.contains(&56) && !d.contains(&9));
    }

    #[test]
    fn ten_thousand_ranks_in_groups_of_a_hundred_leave_rank_0_198_links() {
        let g = groups(&plain(10_000), 100);
        assert_eq!(g.len(), 100);
        assert_eq!(direct(&g).len(), 99 + 99);
        // Every rank but 0 is timed exactly once: by rank 0 or by its leader.
        let mut timed: Vec<usize> = direct(&g);
        for x in g.iter().filter(|x| x.leader != 0) {
            timed.extend(&x.members);
        }
        timed.sort_unstable();
        assert_eq!(timed, (1..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn the_switch_groups_nodes_and_a_big_switch_is_cut_in_pieces() {
        let topo = |s: &str, n: usize| Some(format!("{s}.node{n}"));
        let nodes = vec![
            (0, topo("s0.s1", 0)),
            (1, topo("s0.s2", 1)),
            (2, topo("s0.s1", 2)),
            (3, topo("s0.s2", 3)),
            (4, topo("s0.s2", 4)),
            (5, topo("s0.s2", 5)),
            (6, None),
        ];
        let g = groups(&nodes, 3);
        let keys: Vec<(&str, usize, Vec<usize>)> = g
            .iter()
            .map(|g| (g.key.as_str(), g.leader, g.members.clone()))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("s0.s1", 0, vec![2]),
                ("s0.s2 (part 1 of 2)", 1, vec![3, 4]),
                ("s0.s2 (part 2 of 2)", 5, vec![]),
                ("rank 6", 6, vec![]),
            ]
        );
    }

    #[test]
    fn a_group_size_of_one_is_the_star_and_a_bare_name_has_no_switch() {
        let g = groups(&plain(5), 1);
        assert_eq!(g.len(), 5);
        assert_eq!(direct(&g), vec![1, 2, 3, 4]);
        assert_eq!(groups(&plain(5), 0).len(), 5);
        assert_eq!(switch_of("node7"), None);
        assert_eq!(switch_of(".node7"), None);
        assert_eq!(switch_of("s0.s3.node17"), Some("s0.s3"));
    }
}
