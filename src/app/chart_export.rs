//! Copying or saving a chart as PNG, for pasting into a review. Every chart
//! is drawn through [`chart_ui`], which adds a small "PNG" menu beside it.
//! A choice becomes a [`Command::ExportChart`]; the app waits two frames (so
//! the menu is gone from the picture), asks the window for a screenshot
//! (`ViewportCommand::Screenshot`), crops it to the chart's rectangle and
//! either copies it to the clipboard or hands it to a job that asks where to
//! save it, encodes it and writes it. The frame never touches the disk.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use egui::{ColorImage, Rect};

use super::jobs::{Job, Poll};
use super::{App, Command, Commands};

/// Where a chart's picture goes.
#[derive(Debug, Clone, PartialEq)]
pub enum ChartTarget {
    /// The clipboard, as an image.
    Clipboard,
    /// A PNG file the user picks in a save dialog.
    Dialog,
    /// This PNG file (tests, scripts).
    File(PathBuf),
}

/// One chart to export: its name (the file name offered), where it lies on
/// screen (points) and where the picture goes.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartShot {
    /// The chart's name, e.g. "codes".
    pub name: String,
    /// Its visible rectangle, in points.
    pub rect: Rect,
    /// Where the picture goes.
    pub target: ChartTarget,
}

/// Frames to wait after the click before the screenshot: the menu closes
/// at the end of the click's frame and is gone from the next one.
const SETTLE_FRAMES: u8 = 2;
/// How long the window may take to deliver the screenshot.
const DELIVERY_LIMIT: Duration = Duration::from_secs(5);

type Delivered = (ChartShot, Arc<ColorImage>, f32);

/// The export in flight and the save jobs.
#[derive(Default)]
pub(super) struct ChartExport {
    /// A request waiting for the screen to settle, and frames left.
    waiting: Option<(ChartShot, u8)>,
    /// When the screenshot was asked for, until it arrives.
    asked: Option<Instant>,
    /// Where the screenshot callback leaves the picture (it runs on the
    /// integration's side, after the frame is painted).
    inbox: Arc<Mutex<Option<Delivered>>>,
    saves: Vec<Job<Result<String, String>>>,
    /// The last picture copied to the clipboard (tests check its size).
    last_copied: Option<[usize; 2]>,
}

impl ChartExport {
    /// Is an export waiting for its screenshot or being saved?
    pub(super) fn busy(&self) -> bool {
        self.waiting.is_some()
            || self.asked.is_some()
            || !self.saves.is_empty()
            || self.inbox.lock().map(|s| s.is_some()).unwrap_or(false)
    }
}

/// Draws a chart through `add` with a "PNG" menu (copy, save) on the
/// right of a line above it. `name` names the chart in the menu's label
/// and the file name offered.
pub(super) fn chart_ui<R>(
    ui: &mut egui::Ui,
    name: &str,
    tx: &mut Commands,
    add: impl FnOnce(&mut egui::Ui, &mut Commands) -> R,
) -> R {
    let menu_row = ui.horizontal(|ui| {
        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
            png_menu_ui(ui, name)
        })
        .inner
    });
    let inner = ui.scope(|ui| add(ui, tx));
    let rect = inner.response.rect.intersect(ui.clip_rect());
    if let Some(target) = menu_row.inner {
        tx.send(Command::ExportChart(ChartShot {
            name: name.to_string(),
            rect,
            target,
        }));
    }
    inner.inner
}

fn png_menu_ui(ui: &mut egui::Ui, name: &str) -> Option<ChartTarget> {
    let mut chosen = None;
    let r = ui.menu_button(egui::RichText::new("PNG").small(), |ui| {
        if ui.button("Copy as PNG").clicked() {
            chosen = Some(ChartTarget::Clipboard);
        }
        if ui.button("Save as PNG…").clicked() {
            chosen = Some(ChartTarget::Dialog);
        }
    });
    let label = format!("{name} chart: PNG");
    r.response
        .widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &label));
    r.response
        .on_hover_text(format!("Copy the {name} chart or save it as PNG"));
    chosen
}

/// The part of `image` (a screenshot, in pixels) under `rect` (points):
/// the edges are rounded outwards and clamped to the image, so a chart
/// partly scrolled out of view gives its visible part. `None` when nothing
/// of it is on screen.
pub fn crop(image: &ColorImage, rect: Rect, pixels_per_point: f32) -> Option<ColorImage> {
    let [w, h] = image.size;
    let px = |v: f32, max: usize| -> usize {
        if v.is_nan() || v <= 0.0 {
            0
        } else {
            (v as usize).min(max)
        }
    };
    let (x0, y0) = (
        px((rect.min.x * pixels_per_point).floor(), w),
        px((rect.min.y * pixels_per_point).floor(), h),
    );
    let (x1, y1) = (
        px((rect.max.x * pixels_per_point).ceil(), w),
        px((rect.max.y * pixels_per_point).ceil(), h),
    );
    if x1 <= x0 || y1 <= y0 || image.pixels.len() != w * h {
        return None;
    }
    Some(image.region_by_pixels([x0, y0], [x1 - x0, y1 - y0]))
}

/// `image` as PNG bytes (8-bit RGBA, straight alpha).
pub fn encode_png(image: &ColorImage) -> Result<Vec<u8>, String> {
    let [w, h] = image.size;
    let (Ok(w32), Ok(h32)) = (u32::try_from(w), u32::try_from(h)) else {
        return Err(format!("a {w}×{h} picture is too big for PNG"));
    };
    let rgba: Vec<u8> = image
        .pixels
        .iter()
        .flat_map(|c| c.to_srgba_unmultiplied())
        .collect();
    let buf = image::RgbaImage::from_raw(w32, h32, rgba)
        .ok_or_else(|| format!("the {w}×{h} picture has the wrong number of pixels"))?;
    let mut out = std::io::Cursor::new(Vec::new());
    buf.write_to(&mut out, image::ImageFormat::Png)
        .map_err(|e| format!("could not encode the PNG: {e}"))?;
    Ok(out.into_inner())
}

/// A safe file name from a chart's name.
fn file_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("bundlescope-{}.png", clean.trim_matches('-'))
}

/// Encodes and writes the picture unless `out` lies inside the bundle's
/// folder (the app never writes there).
fn write_png(
    bundle: Option<&PathBuf>,
    out: &std::path::Path,
    image: &ColorImage,
) -> Result<String, String> {
    use crate::util::paths::{bundle_folder, is_inside};
    if let Some(folder) = bundle.and_then(|b| bundle_folder(b))
        && is_inside(out, &folder)
    {
        return Err("bundlescope never writes into the bundle folder; choose another place".into());
    }
    let bytes = encode_png(image)?;
    std::fs::write(out, bytes).map_err(|e| format!("could not save {}: {e}", out.display()))?;
    Ok(format!("chart saved to {}", out.display()))
}

impl App {
    /// Starts an export: the screenshot is asked for once the screen has
    /// settled.
    pub(super) fn export_chart(&mut self, shot: ChartShot) {
        self.charts.waiting = Some((shot, SETTLE_FRAMES));
        if let Some(ctx) = &self.ctx {
            ctx.request_repaint();
        }
    }

    /// Once a frame: counts the waiting request down and asks for the
    /// screenshot when it is due.
    pub(super) fn chart_export_tick(&mut self, ctx: &egui::Context) {
        if let Some(asked) = self.charts.asked {
            // The integration answers after painting a frame; keep frames
            // coming until it has (its wake-up can be lost between frames).
            if asked.elapsed() > DELIVERY_LIMIT {
                self.charts.asked = None;
                self.set_notice("the window did not deliver a picture of the chart", true);
            } else {
                ctx.request_repaint_after(Duration::from_millis(15));
            }
        }
        let Some((shot, left)) = self.charts.waiting.take() else {
            return;
        };
        if left > 0 {
            self.charts.waiting = Some((shot, left - 1));
            ctx.request_repaint();
            return;
        }
        self.charts.asked = Some(Instant::now());
        let inbox = self.charts.inbox.clone();
        let wake = ctx.clone();
        let ppp = ctx.pixels_per_point();
        ctx.send_viewport_cmd(egui::ViewportCommand::Screenshot(
            egui::ScreenshotCallback::new(move |image| {
                if let Ok(mut slot) = inbox.lock() {
                    *slot = Some((shot, image, ppp));
                }
                wake.request_repaint();
            }),
        ));
    }

    /// Takes a delivered screenshot (copy or start the save job) and the
    /// save jobs' answers.
    pub(super) fn poll_chart_export(&mut self) {
        let delivered = self.charts.inbox.lock().ok().and_then(|mut s| s.take());
        if let Some((shot, image, ppp)) = delivered {
            self.charts.asked = None;
            match crop(&image, shot.rect, ppp) {
                None => self.set_notice(
                    format!(
                        "the {} chart is not on screen; scroll to it and try again",
                        shot.name
                    ),
                    true,
                ),
                Some(picture) => self.deliver_chart(shot, picture),
            }
        }
        let mut answers = Vec::new();
        self.charts.saves.retain(|j| match j.poll() {
            Poll::Msg(m) => {
                answers.push(m);
                false
            }
            Poll::Empty => true,
            Poll::Ended => false,
        });
        for a in answers {
            match a {
                Ok(m) => self.set_notice(m, false),
                Err(m) if m.is_empty() => {}
                Err(m) => self.set_notice(m, true),
            }
        }
    }

    fn deliver_chart(&mut self, shot: ChartShot, picture: ColorImage) {
        let bundle = self.session.as_ref().map(|s| s.path.clone());
        let name = shot.name;
        let job = match shot.target {
            ChartTarget::Clipboard => {
                self.charts.last_copied = Some(picture.size);
                if let Some(ctx) = &self.ctx {
                    ctx.copy_image(picture);
                }
                self.set_notice(format!("the {name} chart is on the clipboard"), false);
                return;
            }
            ChartTarget::Dialog => Job::once("save-chart", self.ctx.clone(), move |_| {
                let Some(out) = rfd::FileDialog::new()
                    .set_title("Save chart as PNG")
                    .set_file_name(file_name(&name))
                    .add_filter("PNG", &["png"])
                    .save_file()
                else {
                    return Err(String::new());
                };
                write_png(bundle.as_ref(), &out, &picture)
            }),
            ChartTarget::File(out) => Job::once("save-chart", self.ctx.clone(), move |_| {
                write_png(bundle.as_ref(), &out, &picture)
            }),
        };
        match job {
            Ok(j) => self.charts.saves.push(j),
            Err(e) => self.set_notice(e, true),
        }
    }

    /// The size (pixels) of the last chart copied to the clipboard.
    pub fn last_copied_chart(&self) -> Option<[usize; 2]> {
        self.charts.last_copied
    }

    /// Is a chart export waiting for its picture or being saved? For tests.
    pub fn exporting_chart(&self) -> bool {
        self.charts.busy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egui::{Color32, pos2};

    /// A 40×30 picture where each pixel's red is its x and green its y.
    fn gradient() -> ColorImage {
        let (w, h) = (40, 30);
        let pixels = (0..h)
            .flat_map(|y| (0..w).map(move |x| Color32::from_rgb(x as u8, y as u8, 200)))
            .collect();
        ColorImage::new([w, h], pixels)
    }

    #[test]
    fn crop_scales_points_to_pixels_and_rounds_outwards() {
        let img = gradient();
        // Points 5.2..10.5 × 3..7 at 2 pixels a point: pixels 10..21 × 6..14.
        let rect = Rect::from_min_max(pos2(5.2, 3.0), pos2(10.5, 7.0));
        let c = crop(&img, rect, 2.0).unwrap();
        assert_eq!(c.size, [11, 8]);
        for y in 0..8 {
            for x in 0..11 {
                let p = c.pixels[y * 11 + x];
                assert_eq!((p.r(), p.g()), ((10 + x) as u8, (6 + y) as u8));
            }
        }
    }

    #[test]
    fn crop_clamps_to_the_picture_and_refuses_what_is_off_screen() {
        let img = gradient();
        let half_out = Rect::from_min_max(pos2(-5.0, 25.0), pos2(8.0, 90.0));
        let c = crop(&img, half_out, 1.0).unwrap();
        assert_eq!(c.size, [8, 5]);
        assert_eq!(c.pixels[0].g(), 25);
        let off = Rect::from_min_max(pos2(50.0, 0.0), pos2(60.0, 10.0));
        assert!(crop(&img, off, 1.0).is_none());
        let nan = Rect::from_min_max(pos2(f32::NAN, 0.0), pos2(f32::NAN, 10.0));
        assert!(crop(&img, nan, 1.0).is_none());
        // A picture whose pixel count disagrees with its size is refused.
        let mut bad = gradient();
        bad.pixels.pop();
        assert!(
            crop(
                &bad,
                Rect::from_min_max(pos2(0.0, 0.0), pos2(4.0, 4.0)),
                1.0
            )
            .is_none()
        );
    }

    /// Reads a PNG back with the `png` crate itself, not through `image`.
    fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgba);
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    #[test]
    fn the_crop_encodes_to_a_png_with_the_same_pixels() {
        let img = gradient();
        let c = crop(
            &img,
            Rect::from_min_max(pos2(3.0, 4.0), pos2(9.0, 8.0)),
            1.0,
        )
        .unwrap();
        let bytes = encode_png(&c).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let (w, h, rgba) = decode(&bytes);
        assert_eq!((w, h), (6, 4));
        for y in 0..4 {
            for x in 0..6 {
                let at = (y * 6 + x) * 4;
                assert_eq!(&rgba[at..at + 4], &[(3 + x) as u8, (4 + y) as u8, 200, 255]);
            }
        }
    }

    #[test]
    fn translucent_pixels_are_written_unmultiplied() {
        // Colour32 is premultiplied; PNG wants straight alpha.
        let c = ColorImage::new(
            [1, 1],
            vec![Color32::from_rgba_unmultiplied(200, 100, 0, 128)],
        );
        let (_, _, rgba) = decode(&encode_png(&c).unwrap());
        assert_eq!(rgba[3], 128);
        assert!(
            rgba[0].abs_diff(200) <= 2 && rgba[1].abs_diff(100) <= 2,
            "{rgba:?}"
        );
    }

    #[test]
    fn file_names_are_plain() {
        assert_eq!(file_name("E2M1 codes"), "bundlescope-E2M1-codes.png");
        assert_eq!(
            file_name("layer × expert map"),
            "bundlescope-layer---expert-map.png"
        );
    }
}
