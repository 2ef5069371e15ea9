//! Sample grids: a batch of images in [-1, 1] (NCHW) tiled into one 8-bit PNG.
//!
//! It owns the tensor → pixel conversion (diffusers' pipelines:
//! `(x / 2 + 0.5).clamp(0, 1) · 255`, rounded) and the grid layout
//! (torchvision `make_grid` style: `nrow` images per row, 2-pixel black
//! padding). Files are written atomically. It must not generate images.
use std::path::Path;

use anyhow::Context;
use image::{DynamicImage, ImageBuffer, ImageFormat, Luma, Rgb, Rgba};
use tch::{Device, Kind, Tensor};

use crate::CliError;

/// Pixels between and around the tiles (torchvision `make_grid` default).
pub const GRID_PADDING: usize = 2;

/// Tiles `images` (`[N, C, H, W]`, values in [-1, 1], C = 1, 3 or 4) into one
/// image, `nrow` per row (default ⌈√N⌉).
pub fn grid_image(images: &Tensor, nrow: Option<usize>) -> anyhow::Result<DynamicImage> {
    let size = images.size();
    if size.len() != 4 || !matches!(size[1], 1 | 3 | 4) || size[0] == 0 {
        anyhow::bail!("a sample grid needs a non-empty [N, 1|3|4, H, W] batch, got {size:?}");
    }
    let (n, c, h, w) = (
        size[0] as usize,
        size[1] as usize,
        size[2] as usize,
        size[3] as usize,
    );
    let cols = nrow
        .unwrap_or_else(|| (n as f64).sqrt().ceil() as usize)
        .clamp(1, n);
    let rows = n.div_ceil(cols);
    let pixels: Vec<u8> = {
        let t = ((images.detach().to_device(Device::Cpu).to_kind(Kind::Float) / 2.0 + 0.5)
            .clamp(0.0, 1.0)
            * 255.0)
            .round()
            .to_kind(Kind::Uint8)
            .permute([0, 2, 3, 1]) // NHWC
            .contiguous();
        Vec::<u8>::try_from(&t.flatten(0, -1)).context("copying the images to the host")?
    };
    let gw = cols * (w + GRID_PADDING) + GRID_PADDING;
    let gh = rows * (h + GRID_PADDING) + GRID_PADDING;
    let mut buf = vec![0u8; gw * gh * c];
    for i in 0..n {
        let (gy, gx) = (i / cols, i % cols);
        let (oy, ox) = (
            GRID_PADDING + gy * (h + GRID_PADDING),
            GRID_PADDING + gx * (w + GRID_PADDING),
        );
        for y in 0..h {
            let src = &pixels[((i * h + y) * w) * c..((i * h + y) * w + w) * c];
            let dst = ((oy + y) * gw + ox) * c;
            buf[dst..dst + w * c].copy_from_slice(src);
        }
    }
    let (gw, gh) = (gw as u32, gh as u32);
    let img = match c {
        1 => ImageBuffer::<Luma<u8>, _>::from_raw(gw, gh, buf).map(DynamicImage::ImageLuma8),
        3 => ImageBuffer::<Rgb<u8>, _>::from_raw(gw, gh, buf).map(DynamicImage::ImageRgb8),
        _ => ImageBuffer::<Rgba<u8>, _>::from_raw(gw, gh, buf).map(DynamicImage::ImageRgba8),
    };
    img.context("grid buffer size")
}

/// The grid of [`grid_image`] encoded as PNG bytes (e.g. for TensorBoard).
pub fn encode_grid_png(images: &Tensor, nrow: Option<usize>) -> anyhow::Result<Vec<u8>> {
    let img = grid_image(images, nrow)?;
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, ImageFormat::Png)
        .context("encoding PNG")?;
    Ok(out.into_inner())
}

/// Writes the grid of [`grid_image`] to `path` as PNG, atomically.
pub fn write_grid_png(images: &Tensor, path: &Path, nrow: Option<usize>) -> anyhow::Result<()> {
    let png = encode_grid_png(images, nrow)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let cannot = |e: &dyn std::fmt::Display| {
        CliError::usage(format!("cannot write {}: {e}", path.display()))
            .with_hint("choose a writable output path")
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".imgctl-")
        .suffix(".png.tmp")
        .tempfile_in(dir)
        .map_err(|e| cannot(&e))?;
    std::io::Write::write_all(&mut tmp, &png).map_err(|e| cannot(&e))?;
    tmp.persist(path).map_err(|e| cannot(&e.error))?;
    Ok(())
}
