//! TensorBoard event files written by hand: TFRecord framing around `Event`
//! protocol buffers holding scalar and image summaries.
//!
//! Owns the byte format only (protobuf encoding, record framing, file naming);
//! it knows nothing about training. It must not pull in a protobuf crate: the
//! handful of fields we write are encoded here.
//!
//! Sources for the format:
//! - TFRecord framing: `tensorflow/core/lib/io/record_writer.cc` (u64 length,
//!   masked crc32c of the length, data, masked crc32c of the data).
//! - CRC masking: `tensorflow/core/lib/hash/crc32c.h` (`kMaskDelta = 0xa282ead8`).
//! - Messages: `tensorboard/compat/proto/event.proto` (`Event`: wall_time = 1,
//!   step = 2, file_version = 3, summary = 5) and `summary.proto` (`Summary.value`
//!   = 1; `Value`: tag = 1, simple_value = 2, image = 4; `Image`: height = 1,
//!   width = 2, colorspace = 3, encoded_image_string = 4).
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The file version TensorBoard expects in the first event (event.proto).
const FILE_VERSION: &str = "brain.Event:2";

/// Masks a CRC the way TFRecord does (crc32c.h: rotate right by 15, add 0xa282ead8).
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Frames one record: length, masked CRC of the length, data, masked CRC of the data.
pub fn tfrecord(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    out
}

/// Minimal protobuf writer: varints, fixed64/fixed32 and length-delimited fields.
#[derive(Default)]
struct Proto(Vec<u8>);

impl Proto {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint(((field as u64) << 3) | wire_type as u64);
    }
    fn double(&mut self, field: u32, v: f64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn float(&mut self, field: u32, v: f32) {
        self.key(field, 5);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn int(&mut self, field: u32, v: i64) {
        self.key(field, 0);
        self.varint(v as u64);
    }
    fn bytes(&mut self, field: u32, v: &[u8]) {
        self.key(field, 2);
        self.varint(v.len() as u64);
        self.0.extend_from_slice(v);
    }
}

/// One value of a summary.
#[derive(Debug, Clone)]
pub enum SummaryValue {
    /// A scalar (`simple_value`).
    Scalar(f32),
    /// An encoded PNG of `height` × `width` with `channels` colour channels.
    Png {
        /// Image height in pixels.
        height: u32,
        /// Image width in pixels.
        width: u32,
        /// 1 grey, 3 RGB, 4 RGBA (`Summary.Image.colorspace`).
        channels: u32,
        /// The PNG file bytes.
        data: Vec<u8>,
    },
}

/// Encodes an `Event` with a summary of `(tag, value)` pairs.
pub fn encode_summary_event(wall_time: f64, step: i64, values: &[(&str, SummaryValue)]) -> Vec<u8> {
    let mut summary = Proto::default();
    for (tag, value) in values {
        let mut v = Proto::default();
        v.bytes(1, tag.as_bytes());
        match value {
            SummaryValue::Scalar(x) => v.float(2, *x),
            SummaryValue::Png {
                height,
                width,
                channels,
                data,
            } => {
                let mut img = Proto::default();
                img.int(1, *height as i64);
                img.int(2, *width as i64);
                img.int(3, *channels as i64);
                img.bytes(4, data);
                v.bytes(4, &img.0);
            }
        }
        summary.bytes(1, &v.0);
    }
    let mut event = Proto::default();
    event.double(1, wall_time);
    event.int(2, step);
    event.bytes(5, &summary.0);
    event.0
}

fn encode_version_event(wall_time: f64) -> Vec<u8> {
    let mut event = Proto::default();
    event.double(1, wall_time);
    event.bytes(3, FILE_VERSION.as_bytes());
    event.0
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Writes `events.out.tfevents.<time>.<host>` in a log directory.
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// Creates the directory and a new event file with its version record.
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let wall = now();
        // A suffix keeps two writers started in the same second apart.
        let mut path = dir.join(format!(
            "events.out.tfevents.{}.{}",
            wall as u64,
            crate::sys::net::hostname()
        ));
        let mut n = 1;
        while path.symlink_metadata().is_ok() {
            path = dir.join(format!(
                "events.out.tfevents.{}.{}.{n}",
                wall as u64,
                crate::sys::net::hostname()
            ));
            n += 1;
        }
        // A new file, never an existing name (nor a link planted there).
        let mut out = BufWriter::new(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?,
        );
        out.write_all(&tfrecord(&encode_version_event(wall)))?;
        out.flush()?;
        Ok(Self { path, out })
    }

    /// The event file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends scalars for `step`.
    pub fn scalars(&mut self, step: i64, values: &[(&str, f32)]) -> std::io::Result<()> {
        let values: Vec<(&str, SummaryValue)> = values
            .iter()
            .map(|(t, v)| (*t, SummaryValue::Scalar(*v)))
            .collect();
        self.out
            .write_all(&tfrecord(&encode_summary_event(now(), step, &values)))
    }

    /// Appends an image summary (PNG bytes) for `step`.
    pub fn png(&mut self, step: i64, tag: &str, png: &[u8]) -> std::io::Result<()> {
        let (width, height) = png_size(png).unwrap_or((0, 0));
        let value = SummaryValue::Png {
            height,
            width,
            channels: png_channels(png).unwrap_or(3),
            data: png.to_vec(),
        };
        self.out.write_all(&tfrecord(&encode_summary_event(
            now(),
            step,
            &[(tag, value)],
        )))
    }

    /// Flushes buffered records to the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Width and height from a PNG's IHDR chunk (PNG spec: signature 8 bytes, then
/// the IHDR length, type, width and height as big-endian u32).
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || &png[12..16] != b"IHDR" {
        return None;
    }
    let w = u32::from_be_bytes(png[16..20].try_into().ok()?);
    let h = u32::from_be_bytes(png[20..24].try_into().ok()?);
    Some((w, h))
}

/// The colour channels of a PNG, from its IHDR colour type (PNG spec 11.2.2):
/// grey 1, grey + alpha 2, RGB or palette 3, RGBA 4.
fn png_channels(png: &[u8]) -> Option<u32> {
    if png.len() < 26 || &png[12..16] != b"IHDR" {
        return None;
    }
    match png[25] {
        0 => Some(1),
        4 => Some(2),
        2 | 3 => Some(3),
        6 => Some(4),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_channels_follow_the_colour_type() {
        for (kind, channels) in [(0u8, 1u32), (4, 2), (2, 3), (3, 3), (6, 4)] {
            let mut png = vec![0u8; 33];
            png[12..16].copy_from_slice(b"IHDR");
            png[25] = kind;
            assert_eq!(png_channels(&png), Some(channels), "colour type {kind}");
        }
        assert_eq!(png_channels(b"not a png"), None);
    }

    #[test]
    fn crc_of_known_input_matches_crc32c_reference() {
        // RFC 3720 B.4: crc32c of 32 zero bytes is 0x8a9136aa.
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
        let m = masked_crc32c(&[0u8; 32]);
        assert_eq!(m, 0x8a91_36aau32.rotate_right(15).wrapping_add(0xa282_ead8));
    }

    #[test]
    fn varint_encoding() {
        let mut p = Proto::default();
        p.varint(300);
        assert_eq!(p.0, vec![0xac, 0x02]);
    }

    #[test]
    fn record_framing_layout() {
        let r = tfrecord(b"abc");
        assert_eq!(r.len(), 8 + 4 + 3 + 4);
        assert_eq!(&r[..8], &3u64.to_le_bytes());
        assert_eq!(&r[12..15], b"abc");
    }
}
