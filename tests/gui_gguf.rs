//! The app on a GGUF file: dropped onto the window, its metadata tree in
//! the Summary (the tokenizer's long array as a count and a searchable
//! list), and a Q4_K tensor's code and sub-block scale histograms.
#![cfg(feature = "gui")]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::harness::*;
use egui_kittest::kittest::Queryable;

#[derive(Debug)]
struct Dropped(PathBuf);

impl egui::DroppedFile for Dropped {
    fn path(&self) -> &Path {
        &self.0
    }
    fn bytes(&self) -> Result<Vec<u8>, String> {
        Err("read through the path".into())
    }
}

#[test]
fn dropping_a_gguf_shows_its_metadata_tree_and_a_q4_k_histogram() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("model.gguf");
    bundlescope::sample::gguf::write(&file, 9).unwrap();
    let mut g = gui();
    g.harness
        .input_mut()
        .dropped_files
        .push(Arc::new(Dropped(file.clone())));
    g.harness.step();
    g.finish();
    assert_eq!(g.app().session().unwrap().path, file);
    assert_eq!(g.verdict(), "Valid");
    assert_eq!(g.tensor_count(), 19);
    // The Summary names what it hashed (no manifest here), and no rows of
    // a manifest's declarations a GGUF does not make.
    assert!(g.shows("header SHA-256"));
    assert!(!g.shows("manifest SHA-256"));
    assert!(!g.shows("source revision"));
    assert!(!g.shows("config.json (expected)"));
    // The Summary: general open by default, the others collapsed with counts.
    assert!(g.shows("general (6)"), "general group");
    assert!(g.shows("\"llama\""), "general.architecture's value");
    assert!(g.shows("tokenizer (3)"), "tokenizer group");
    g.harness.get_by_label("tokenizer (3)").click();
    g.harness.run_steps(2);
    assert!(
        g.shows("tokens: ARRAY[STRING] × 1000"),
        "count, not the list"
    );
    assert!(
        !g.shows("tok999"),
        "a long array is not laid out until opened"
    );
    g.harness
        .query_all_by_label_contains("tokens: ARRAY[STRING] × 1000")
        .next()
        .expect("the tokens header")
        .click();
    g.harness.run_steps(2);
    assert!(g.shows("1000 of 1000 shown"));
    // The search narrows the list: tok99 and tok990..tok999.
    // Focus the array's search field, then type.
    g.harness
        .get_by_role_and_label(egui::accesskit::Role::TextInput, "find")
        .click();
    g.harness.run_steps(2);
    g.harness
        .get_by_role_and_label(egui::accesskit::Role::TextInput, "find")
        .type_text("tok99");
    g.harness.run_steps(3);
    assert!(g.shows("11 of 1000 shown"), "the search narrows the list");
    assert!(g.shows("\"tok99\""), "the first match is listed");
    assert!(g.shows("chat_template: text"), "the chat template as text");
    // A Q4_K tensor: its codes (16 levels) and 6-bit sub-block scales.
    let i = g.select("token_embd.weight");
    let stats = g.app().session().unwrap().model.stats[i]
        .clone()
        .expect("stats");
    assert_eq!(stats.codes.as_ref().unwrap().counts.len(), 16);
    let sub = stats.gguf.as_ref().unwrap().sub_scales.as_ref().unwrap();
    assert_eq!(sub.bits, 6);
    assert!(g.shows("Codes"));
    assert!(g.shows("Sub-block scales"));
    assert!(g.shows("Sub-block mins"));
    // The F16 d and dmin distributions, each a chart.
    assert!(g.shows("Scales"));
    assert!(g.shows("Block mins (|m|, |dmin|)"));
    let mins = stats
        .gguf
        .as_ref()
        .unwrap()
        .mins
        .as_ref()
        .expect("dmin summary");
    let count = mins.count.to_string();
    assert!(
        g.harness
            .query_all_by_label_contains(&format!("{count} mins · min"))
            .next()
            .is_some(),
        "the dmin line counts one per block"
    );
    // A type bundlescope lists and size-checks only says so.
    g.select("blk.1.ffn_gate_exps.weight");
    assert!(g.shows("IQ4_XS: listed and size-checked, not decoded by bundlescope"));
}

#[test]
fn two_gguf_files_in_one_folder_do_not_share_a_cached_audit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("models");
    std::fs::create_dir(&dir).unwrap();
    let (a, b) = (dir.join("a.gguf"), dir.join("b.gguf"));
    bundlescope::sample::gguf::write(&a, 1).unwrap();
    bundlescope::sample::gguf::write(&b, 2).unwrap();
    // b is broken: a NaN F32 value.
    let b_bundle = bundlescope::format::open(&b).unwrap();
    let norm = &b_bundle.tensors[b_bundle.find("output_norm.weight").unwrap()];
    let at = norm.offset.unwrap() as usize;
    let mut bytes = std::fs::read(&b).unwrap();
    bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&b, bytes).unwrap();
    let mut g = gui();
    g.open(&a);
    assert_eq!(g.verdict(), "Valid");
    g.open(&b);
    assert!(
        g.app().session().unwrap().cached.is_none(),
        "b is not a's cache entry"
    );
    assert_eq!(g.verdict(), "Invalid (1 error)");
    g.open(&a);
    assert!(g.app().session().unwrap().cached.is_some());
    assert_eq!(g.verdict(), "Valid");
}

/// A vocabulary-only GGUF written by llama.cpp's converter (fetched by
/// scripts/fetch-llamacpp-vocab.sh): 151,936 tokens and 151,387 merges
/// shown as counts, the token list searchable and laid out only where seen.
#[test]
fn a_llama_cpp_vocabulary_gguf_shows_its_huge_arrays_as_counts() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/ggml-vocab-qwen2.gguf");
    if !common::require_or_skip(
        "llama.cpp's vocabulary GGUF files (scripts/fetch-llamacpp-vocab.sh)",
        file.exists(),
    ) {
        return;
    }
    let mut g = gui();
    g.harness
        .input_mut()
        .dropped_files
        .push(Arc::new(Dropped(file.clone())));
    g.harness.step();
    g.finish();
    assert_eq!(g.verdict(), "Valid");
    assert_eq!(g.tensor_count(), 0);
    g.harness
        .query_all_by_label_contains("tokenizer (")
        .next()
        .expect("the tokenizer group")
        .click();
    g.harness.run_steps(2);
    assert!(g.shows("tokens: ARRAY[STRING] × 151936"));
    assert!(g.shows("merges: ARRAY[STRING] × 151387"));
    assert!(g.shows("token_type: ARRAY[INT32] × 151936"));
    assert!(!g.shows("[PAD151935]"), "no array laid out until opened");
    g.harness
        .query_all_by_label_contains("tokens: ARRAY[STRING] × 151936")
        .next()
        .expect("the tokens header")
        .click();
    g.harness.run_steps(2);
    assert!(g.shows("151936 of 151936 shown"));
    assert!(
        !g.shows("[PAD151935]"),
        "only the rows in view are laid out, not the last token"
    );
    g.harness
        .get_by_role_and_label(egui::accesskit::Role::TextInput, "find")
        .click();
    g.harness.run_steps(2);
    g.harness
        .get_by_role_and_label(egui::accesskit::Role::TextInput, "find")
        .type_text("<|im_start|>");
    g.harness.run_steps(3);
    assert!(
        g.shows("1 of 151936 shown"),
        "the search finds the one token"
    );
    assert!(g.shows("151644  \"<|im_start|>\""), "its index and text");
}
