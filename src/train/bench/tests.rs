//! Tests of the benchmark's own arithmetic (`mod.rs`).
use super::*;

#[test]
fn sizes_double_up_to_n() {
    assert_eq!(scaling_sizes(1), vec![1]);
    assert_eq!(scaling_sizes(2), vec![1, 2]);
    assert_eq!(scaling_sizes(8), vec![1, 2, 4, 8]);
    assert_eq!(scaling_sizes(6), vec![1, 2, 4, 6]);
}

#[test]
fn step_memory_per_image_and_batch_in_budget() {
    let gib = 1u64 << 30;
    let m = StepMemory::new("t", 4 * gib, 6 * gib, 4);
    assert_eq!(m.per_image_bytes, gib / 2);
    // (24 - 4) GiB at 0.5 GiB per image.
    assert_eq!(m.max_batch_in_budget, 40);
    assert_eq!(StepMemory::new("t", gib, gib, 2).per_image_bytes, 0);
}

#[test]
fn median_of_odd_even_and_no_values() {
    assert_eq!(median(vec![0.9, 0.7, 0.8]), 0.8);
    assert_eq!(median(vec![1.0, 0.5]), 0.75);
    assert_eq!(median(vec![]), 0.0);
}

#[test]
fn step_stats() {
    let s = StepStatsMs::of(&[0.003, 0.001, 0.002, 0.010]);
    assert_eq!(s.median, 2.5);
    assert_eq!(s.min, 1.0);
    assert_eq!(s.max, 10.0);
    assert_eq!(s.mean, 4.0);
}
