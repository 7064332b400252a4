//! `cargo run --release -p airlock-bench [-- ROW…]`: runs every benchmark
//! row of the project. Each row times airlock and its baseline alternately
//! in the same run (this machine is noisy), then prints medians, p99s and
//! the ratio against the baseline, with the row's target.
//!
//! Rows are added here by later issues; `--list` names them.

mod broker_rows;
mod build_rows;
mod cluster_rows;
mod git_rows;
mod harness;
mod large_rows;
mod mcp_http_rows;
mod mcp_rows;
mod microvm_rows;
mod policy_rows;
mod rows;
mod run_rows;
mod session_rows;
mod source_rows;
mod staging_rows;
mod stream_rows;
mod tier_rows;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(staging_rows::CONTEND_ARG) {
        if let Err(e) = staging_rows::contend(&args[1..]) {
            eprintln!("contender: {e}");
            std::process::exit(1);
        }
        return;
    }
    if args.iter().any(|a| a == "--list") {
        for row in rows::ALL {
            println!("{}", row.name);
        }
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let wanted: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let mut misses = 0;
    for row in rows::ALL {
        if !wanted.is_empty() && !wanted.iter().any(|w| row.name.contains(w.as_str())) {
            continue;
        }
        match row.run.reports(quick) {
            Ok(reports) => {
                for report in reports {
                    println!("{report}");
                    if !report.met() {
                        misses += 1;
                    }
                }
            }
            Err(e) => {
                println!("{:<44} could not run: {e}", row.name);
                misses += 1;
            }
        }
    }
    if misses > 0 {
        println!("{misses} row(s) missed their target or could not run");
    }
}
