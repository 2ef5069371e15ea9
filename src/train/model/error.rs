//! The model's errors: a config that does not describe a buildable
//! `UNet2DModel` ([`ModelConfigError`]) and weights that cannot be read,
//! written or matched to the model ([`WeightsError`]). What they mean for
//! the user (exit status, hint) is `commands/`'s to say; this file must not
//! name a flag or a command.
use std::path::PathBuf;

/// A model config that cannot be read or does not describe a buildable
/// model (all usage errors: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ModelConfigError {
    /// A preset name (in a config file) that is none of [`super::config::preset_names`].
    #[error("unknown model preset `{name}`")]
    UnknownPreset {
        /// The name given.
        name: String,
        /// The preset it is close to, if any.
        close: Option<&'static str>,
    },
    /// A YAML model config that does not parse (or holds unknown fields).
    #[error("invalid model config {file}: {error}")]
    Yaml {
        /// The input as named in messages.
        file: String,
        /// What is wrong.
        error: String,
    },
    /// A `config.json` that is not JSON.
    #[error("{file} is not valid JSON: {error}")]
    NotJson {
        /// The input as named in messages.
        file: String,
        /// The parse error.
        error: String,
    },
    /// A `config.json` of another diffusers class.
    #[error("{file} describes a `{class}`, not a `UNet2DModel`")]
    NotUNet {
        /// The input as named in messages.
        file: String,
        /// Its `_class_name`.
        class: String,
    },
    /// A `config.json` whose fields do not parse.
    #[error("invalid model config {file}: {error}")]
    Json {
        /// The input as named in messages.
        file: String,
        /// What is wrong.
        error: String,
    },
    /// A model config file that cannot be read.
    #[error("cannot read model config {}: {error}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// A field out of range, or fields that do not fit together.
    #[error("invalid model config: {what}")]
    Invalid {
        /// The field and its value.
        what: String,
        /// Which check it failed.
        check: ModelCheck,
    },
}

/// The check a model config failed ([`ModelConfigError::Invalid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelCheck {
    /// `block_out_channels` is empty.
    NoBlocks,
    /// Unequal numbers of block types and channel counts.
    BlockCounts,
    /// A channel count that is not positive.
    Channels,
    /// An integer field that must be positive.
    Positive,
    /// `time_embedding_dim` not positive.
    TimeEmbedding,
    /// `dropout` outside [0, 1).
    Dropout,
    /// `norm_eps` not a small positive value.
    NormEps,
    /// `mid_block_scale_factor` zero or not finite.
    MidBlockScale,
    /// `downsample_padding` other than 0 or 1.
    DownsamplePadding,
    /// Class conditioning asked for.
    ClassConditioning,
    /// `attention_head_dim` that does not fit a block.
    AttentionHeadDim,
    /// Channels not divisible by the norm groups.
    NormGroups,
    /// A sample size the down/up path does not map back onto itself.
    SampleSize,
    /// A field past its upper bound (`config::MAX_*`).
    TooLarge,
}

/// Weights that cannot be read, written or loaded into the model (all usage
/// errors: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// The output file's directory is not writable.
    #[error("cannot write {}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why not: the error's source, printed as its `caused by:` line
        /// (a full disk is recognised through it).
        #[source]
        error: std::io::Error,
    },
    /// A weights file that cannot be read.
    #[error("cannot read weights {}: {error}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// A file that is not safetensors.
    #[error("{} is not a valid safetensors file: {error}", .path.display())]
    NotSafetensors {
        /// The file.
        path: PathBuf,
        /// The parser's error (its debug form).
        error: String,
    },
    /// A model folder that cannot be created.
    #[error("cannot create {}: {error}", .path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// A state dict whose keys, shapes or dtypes differ from the model's.
    #[error("weights {} do not match the model: {problems}", .path.display())]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The differences, `; `-separated.
        problems: String,
    },
}
