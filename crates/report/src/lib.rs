//! Reports computed from results alone. This crate depends on `msgbench-model` and never on the
//! engine: a report can always be regenerated from `results/` without re-running load.
#![deny(missing_docs)]

pub mod advice;
pub mod charts;
pub mod compare;
pub mod compare_dirs;
pub mod environment;
pub mod fairness;
pub mod faults;
pub mod format;
pub mod html;
pub mod lateness;
pub mod load;
pub mod markdown;
pub mod publish;
pub mod search;
pub mod shards;
pub mod stages;
pub mod streamed;
pub mod streams;
pub mod summary;
pub mod svg;
pub mod thresholds;
pub mod validity;
