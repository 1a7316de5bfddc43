//! The encoder against the vectors sentence-transformers publishes for all-MiniLM-L6-v2.
//! Needs the installed model (`cargo xtask install-model`); `CAIRN_MODELS_DIR` or the
//! default models directory is searched.

use std::path::PathBuf;

use cairn_encoder::SentenceEncoder;

fn model_dir() -> PathBuf {
    let root = std::env::var_os("CAIRN_MODELS_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share/cairn/models"))
        })
        .expect("CAIRN_MODELS_DIR or HOME");
    root.join("all-MiniLM-L6-v2")
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn example_sentence_matches_the_published_vector() {
    let encoder =
        SentenceEncoder::load(&model_dir(), 256).expect("run `cargo xtask install-model`");
    let texts = vec![
        "This is an example sentence".to_string(),
        "Each sentence is converted".to_string(),
    ];
    let vectors = encoder.encode(&texts).unwrap();
    assert_eq!(vectors[0].len(), 384);
    let published = [0.0677, 0.0635, 0.0487, 0.0793];
    for (got, want) in vectors[0].iter().zip(published) {
        assert!(
            (got - want).abs() < 5e-4,
            "{:?} vs {published:?}",
            &vectors[0][..4]
        );
    }
    let norm: f32 = vectors[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4);
    // Padding must not change a vector: the short text alone and beside a long one agree.
    let alone = encoder.encode(&texts[1..]).unwrap();
    assert!(cosine(&alone[0], &vectors[1]) > 0.9999);
}

#[test]
fn a_text_in_a_padded_pass_gets_the_vector_it_gets_alone() {
    let encoder =
        SentenceEncoder::load(&model_dir(), 256).expect("run `cargo xtask install-model`");
    let texts: Vec<String> = [
        "Hi.",
        "My sister moved to Lisbon last spring and opened a small bakery near the river.",
        "The meeting moved to Thursday.",
        "ok",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let together = encoder.encode(&texts).unwrap();
    for (text, vector) in texts.iter().zip(&together) {
        let alone = encoder.encode(std::slice::from_ref(text)).unwrap();
        let agreement = cosine(&alone[0], vector);
        assert!(agreement > 0.9999, "{text:?}: cosine {agreement}");
    }
}

#[test]
fn paraphrases_are_closer_than_unrelated_text() {
    let encoder =
        SentenceEncoder::load(&model_dir(), 256).expect("run `cargo xtask install-model`");
    let texts: Vec<String> = [
        "Our dog is called Biscuit and he chews everything.",
        "What is the name of our pet?",
        "I renewed my passport at the embassy last week.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let v = encoder.encode(&texts).unwrap();
    assert!(cosine(&v[0], &v[1]) > cosine(&v[1], &v[2]) + 0.1);
}

#[test]
fn a_missing_or_corrupt_model_names_the_file() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let missing = SentenceEncoder::load(dir, 256).err().expect("no files");
    assert!(missing.to_string().contains("config.json"), "{missing}");
    let source = model_dir();
    for name in ["config.json", "tokenizer.json"] {
        std::fs::copy(source.join(name), dir.join(name)).unwrap();
    }
    std::fs::write(dir.join("model.safetensors"), b"not a safetensors file").unwrap();
    let corrupt = SentenceEncoder::load(dir, 256)
        .err()
        .expect("corrupt weights");
    assert!(
        corrupt.to_string().contains("model.safetensors"),
        "{corrupt}"
    );
}
