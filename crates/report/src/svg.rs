//! Small SVG charts: line charts (linear or log axes) and grouped bar charts, each a complete,
//! self-contained `<svg>` with its title, axis labels with units, and a legend.
//!
//! Hand-written rather than with a plotting crate: the charts are a few lines and bars, the
//! common Rust plotting crate needs system fonts (font-kit) to lay out text even for SVG output,
//! and here the browser or document viewer lays out the text. The output is deterministic
//! (snapshot-tested) and has no script and no external reference.

/// One chart: file stem, a sentence on how to read it, the SVG.
pub struct Chart {
    /// File stem (`spectrum` → `spectrum.svg`).
    pub name: String,
    /// How to read it.
    pub caption: String,
    /// The SVG document.
    pub svg: String,
}

/// `2 s`, `2.5 s`.
pub(crate) fn seconds_label(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0} s")
    } else {
        format!("{v:.1} s")
    }
}

/// Colour-blind-safe palette (Okabe–Ito), cycled.
const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];
const WIDTH: f64 = 820.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 230.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 58.0;

/// A colour of the palette.
pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// Linear from `min` to `max`.
    Linear,
    /// Base-10 logarithmic (values must be > 0).
    Log,
}

/// One axis: label with unit, scale, range and how tick values are written.
pub struct Axis {
    /// Label, with its unit.
    pub label: String,
    /// Scale.
    pub scale: Scale,
    /// Lowest value shown.
    pub min: f64,
    /// Highest value shown.
    pub max: f64,
    /// Writes a tick value.
    pub format: fn(f64) -> String,
    /// Explicit ticks, instead of computed ones.
    pub ticks: Option<Vec<(f64, String)>>,
}

impl Axis {
    /// An axis spanning `values` (with some headroom), starting at 0 for linear scales.
    pub fn fitted(label: &str, scale: Scale, values: &[f64], format: fn(f64) -> String) -> Axis {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (min, max) = match scale {
            Scale::Linear => {
                let lo = finite.iter().copied().fold(0.0, f64::min);
                (lo, if hi > lo { hi * 1.08 } else { lo + 1.0 })
            }
            Scale::Log => {
                let positive: Vec<f64> = finite.iter().copied().filter(|v| *v > 0.0).collect();
                let lo = positive.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = positive.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if positive.is_empty() {
                    (1.0, 10.0)
                } else {
                    (
                        10f64.powf(lo.log10().floor()),
                        10f64.powf((hi.log10() + 1e-9).ceil()).max(lo * 10.0),
                    )
                }
            }
        };
        Axis {
            label: label.into(),
            scale,
            min,
            max,
            format,
            ticks: None,
        }
    }

    fn fraction(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => (v - self.min) / (self.max - self.min),
            Scale::Log => {
                (v.max(self.min * 1e-3).log10() - self.min.log10())
                    / (self.max.log10() - self.min.log10())
            }
        }
    }

    fn tick_values(&self) -> Vec<(f64, String)> {
        if let Some(t) = &self.ticks {
            return t.clone();
        }
        match self.scale {
            Scale::Log => {
                let (a, b) = (
                    self.min.log10().round() as i32,
                    self.max.log10().round() as i32,
                );
                let mut ticks = Vec::new();
                for e in a..=b {
                    for m in [1.0, 2.0, 5.0] {
                        let v = m * 10f64.powi(e);
                        // Only decades when there are many of them.
                        if (m == 1.0 || b - a <= 3)
                            && v >= self.min * 0.999
                            && v <= self.max * 1.001
                        {
                            ticks.push((v, (self.format)(v)));
                        }
                    }
                }
                ticks
            }
            Scale::Linear => {
                let range = self.max - self.min;
                let raw = range / 5.0;
                let magnitude = 10f64.powf(raw.log10().floor());
                let steps: Vec<f64> = [1.0, 2.0, 2.5, 5.0, 10.0, 20.0, 25.0, 50.0, 100.0]
                    .iter()
                    .map(|m| m * magnitude)
                    .filter(|s| range / s <= 6.0)
                    .collect();
                let ticks_at = |step: f64| {
                    let mut v = (self.min / step).ceil() * step;
                    let mut ticks = Vec::new();
                    while v <= self.max + step * 1e-9 {
                        ticks.push((v, (self.format)(v)));
                        v += step;
                    }
                    ticks
                };
                // A format that cannot show the step (counts: 0.5 reads "0" or "1") would label
                // two ticks alike, one of them at the wrong height: take a coarser step.
                let distinct = |t: &Vec<(f64, String)>| t.windows(2).all(|w| w[0].1 != w[1].1);
                steps
                    .iter()
                    .map(|&s| ticks_at(s))
                    .find(distinct)
                    .unwrap_or_else(|| ticks_at(magnitude * 10.0))
            }
        }
    }
}

/// One line of a line chart.
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points, in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Draw a dot on every point.
    pub dots: bool,
    /// Text next to each point (e.g. the sweep setting), if any.
    pub point_labels: Vec<String>,
}

/// A point to call out (e.g. the knee).
pub struct Callout {
    /// Position.
    pub x: f64,
    /// Position.
    pub y: f64,
    /// Text.
    pub text: String,
}

/// A line chart.
pub struct LineChart {
    /// Title.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// The lines.
    pub series: Vec<Series>,
    /// Points to mark.
    pub callouts: Vec<Callout>,
    /// A horizontal threshold line (e.g. the SLO) and its label.
    pub threshold: Option<(f64, String)>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn open(title: &str, kind: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" data-chart=\"{kind}\" role=\"img\">\n\
         <title>{t}</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{t}</text>\n",
        t = escape(title)
    )
}

fn plot_x(f: f64) -> f64 {
    LEFT + f * (WIDTH - LEFT - RIGHT)
}

fn plot_y(f: f64) -> f64 {
    HEIGHT - BOTTOM - f * (HEIGHT - TOP - BOTTOM)
}

fn axes(out: &mut String, x: Option<&Axis>, y: &Axis) {
    let (x0, x1, y0, y1) = (plot_x(0.0), plot_x(1.0), plot_y(0.0), plot_y(1.0));
    for (v, text) in y.tick_values() {
        let py = plot_y(y.fraction(v));
        out.push_str(&format!(
            "<line x1=\"{x0:.1}\" y1=\"{py:.1}\" x2=\"{x1:.1}\" y2=\"{py:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            x0 - 6.0,
            py + 4.0,
            escape(&text)
        ));
    }
    if let Some(x) = x {
        for (v, text) in x.tick_values() {
            let px = plot_x(x.fraction(v));
            out.push_str(&format!(
                "<line x1=\"{px:.1}\" y1=\"{y1:.1}\" x2=\"{px:.1}\" y2=\"{y0:.1}\" stroke=\"#efefef\"/>\
                 <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
                y0 + 18.0,
                escape(&text)
            ));
        }
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            (x0 + x1) / 2.0,
            HEIGHT - 14.0,
            escape(&x.label)
        ));
    }
    out.push_str(&format!(
        "<text transform=\"translate(18 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n\
         <rect x=\"{x0:.1}\" y=\"{y1:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#888\"/>\n",
        (y0 + y1) / 2.0,
        escape(&y.label),
        x1 - x0,
        y0 - y1
    ));
}

/// Splits a legend entry into lines of at most `width` characters, at spaces when it can.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
        .into_iter()
        .flat_map(|l| {
            let chars: Vec<char> = l.chars().collect();
            chars
                .chunks(width)
                .map(|c| c.iter().collect::<String>())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn legend(out: &mut String, entries: &[(String, &str)]) {
    let x = plot_x(1.0) + 14.0;
    let mut y = TOP + 8.0;
    for (i, (name, colour)) in entries.iter().enumerate() {
        let lines = wrap(name, 28);
        if y + 13.0 * lines.len() as f64 > HEIGHT - 12.0 {
            out.push_str(&format!(
                "<text x=\"{x:.1}\" y=\"{y:.1}\" fill=\"#666\">… and {} more</text>\n",
                entries.len() - i
            ));
            break;
        }
        out.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"12\" height=\"10\" fill=\"{colour}\"/>\n",
            y - 9.0
        ));
        for line in lines {
            out.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{y:.1}\" font-size=\"11\">{}</text>\n",
                x + 17.0,
                escape(&line)
            ));
            y += 13.0;
        }
        y += 4.0;
    }
}

impl LineChart {
    /// The chart as an SVG document.
    pub fn render(&self, kind: &str) -> String {
        let mut out = open(&self.title, kind);
        axes(&mut out, Some(&self.x), &self.y);
        let clip = |f: f64| f.clamp(-0.02, 1.02);
        for (i, s) in self.series.iter().enumerate() {
            let c = colour(i);
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| {
                    (
                        plot_x(clip(self.x.fraction(x))),
                        plot_y(clip(self.y.fraction(y))),
                    )
                })
                .collect();
            if pts.len() > 1 {
                let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                out.push_str(&format!(
                    "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\n",
                    path.join(" ")
                ));
            }
            if s.dots || pts.len() == 1 {
                for (x, y) in &pts {
                    out.push_str(&format!(
                        "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{c}\"/>\n"
                    ));
                }
            }
            for ((x, y), label) in pts.iter().zip(&s.point_labels) {
                out.push_str(&format!(
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"{c}\">{}</text>\n",
                    x + 6.0,
                    y - 6.0,
                    escape(label)
                ));
            }
        }
        if let Some((v, label)) = &self.threshold {
            let y = plot_y(clip(self.y.fraction(*v)));
            let (x, ty, anchor) = self.threshold_label_place(y, label);
            out.push_str(&format!(
                "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#c00\" stroke-dasharray=\"6 4\"/>\
                 <text x=\"{x:.1}\" y=\"{ty:.1}\" fill=\"#c00\" text-anchor=\"{anchor}\">{}</text>\n",
                plot_x(0.0),
                plot_x(1.0),
                escape(label)
            ));
        }
        for k in &self.callouts {
            let (x, y) = (
                plot_x(clip(self.x.fraction(k.x))),
                plot_y(clip(self.y.fraction(k.y))),
            );
            out.push_str(&format!(
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"9\" fill=\"none\" stroke=\"#c00\" stroke-width=\"2\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#c00\" font-weight=\"bold\">{}</text>\n",
                x + 11.0,
                y + 16.0,
                escape(&k.text)
            ));
        }
        let entries: Vec<(String, &str)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), colour(i)))
            .collect();
        if entries.len() > 1 {
            legend(&mut out, &entries);
        }
        out.push_str("</svg>\n");
        out
    }
}

impl LineChart {
    /// Where the threshold's label goes: right or left end of its line, above or below it,
    /// whichever first overlaps no point label (text boxes estimated at 6.5 px a character).
    fn threshold_label_place(&self, y: f64, label: &str) -> (f64, f64, &'static str) {
        let clip = |f: f64| f.clamp(-0.02, 1.02);
        let mut boxes: Vec<(f64, f64, f64, f64)> = Vec::new();
        for s in &self.series {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(px, py)| {
                    (
                        plot_x(clip(self.x.fraction(px))),
                        plot_y(clip(self.y.fraction(py))),
                    )
                })
                .collect();
            // Point labels, dots, and the line between them (sampled every few pixels).
            for (&(x, y), l) in pts.iter().zip(&s.point_labels) {
                let (lx, ly) = (x + 6.0, y - 6.0);
                boxes.push((lx, ly - 11.0, lx + 6.5 * l.chars().count() as f64, ly + 2.0));
            }
            for w in pts.windows(2) {
                let ((x0, y0), (x1, y1)) = (w[0], w[1]);
                let steps = ((x1 - x0).hypot(y1 - y0) / 3.0).ceil().max(1.0) as usize;
                for i in 0..=steps {
                    let t = i as f64 / steps as f64;
                    let (x, y) = (x0 + t * (x1 - x0), y0 + t * (y1 - y0));
                    boxes.push((x - 2.0, y - 2.0, x + 2.0, y + 2.0));
                }
            }
            for &(x, y) in &pts {
                boxes.push((x - 4.0, y - 4.0, x + 4.0, y + 4.0));
            }
        }
        let width = 6.5 * label.chars().count() as f64;
        let candidates = [
            (plot_x(1.0) - 4.0, y - 5.0, "end"),
            (plot_x(0.0) + 4.0, y - 5.0, "start"),
            (plot_x(1.0) - 4.0, y + 15.0, "end"),
            (plot_x(0.0) + 4.0, y + 15.0, "start"),
        ];
        let overlaps = |&(x, ty, anchor): &(f64, f64, &str)| {
            let (x0, x1) = if anchor == "end" {
                (x - width, x)
            } else {
                (x, x + width)
            };
            let (y0, y1) = (ty - 11.0, ty + 2.0);
            boxes
                .iter()
                .any(|&(bx0, by0, bx1, by1)| x0 < bx1 && bx0 < x1 && y0 < by1 && by0 < y1)
        };
        candidates
            .iter()
            .find(|c| !overlaps(c))
            .copied()
            .unwrap_or(candidates[0])
    }
}

/// Grouped bars: one group per category, one bar per series, optional min–max whiskers.
pub struct BarChart {
    /// Title.
    pub title: String,
    /// Category names (x axis), e.g. sweep points.
    pub categories: Vec<String>,
    /// What the categories are (x axis label).
    pub category_label: String,
    /// Vertical axis.
    pub y: Axis,
    /// `(name, value per category, (min, max) per category)`.
    pub series: Vec<BarSeries>,
}

/// One series of a bar chart: `(name, value per category, (min, max) per category)`.
pub type BarSeries = (String, Vec<f64>, Vec<(f64, f64)>);

impl BarChart {
    /// The chart as an SVG document.
    pub fn render(&self, kind: &str) -> String {
        let mut out = open(&self.title, kind);
        axes(&mut out, None, &self.y);
        let n = self.categories.len().max(1) as f64;
        let group_w = (plot_x(1.0) - plot_x(0.0)) / n;
        let bars = self.series.len().max(1) as f64;
        let bar_w = (group_w * 0.75 / bars).min(60.0);
        for (ci, category) in self.categories.iter().enumerate() {
            let gx = plot_x(0.0) + group_w * ci as f64;
            let centre = gx + group_w / 2.0;
            for (si, (_, values, ranges)) in self.series.iter().enumerate() {
                let v = values.get(ci).copied().unwrap_or(0.0);
                let x = centre - bar_w * bars / 2.0 + bar_w * si as f64;
                let top = plot_y(self.y.fraction(v).clamp(0.0, 1.0));
                out.push_str(&format!(
                    "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {}</title></rect>\n",
                    bar_w - 2.0,
                    plot_y(0.0) - top,
                    colour(si),
                    escape(category),
                    escape(&(self.y.format)(v))
                ));
                if let Some(&(lo, hi)) = ranges.get(ci) {
                    if hi > lo {
                        let mid = x + (bar_w - 2.0) / 2.0;
                        let (ylo, yhi) = (
                            plot_y(self.y.fraction(lo).clamp(0.0, 1.0)),
                            plot_y(self.y.fraction(hi).clamp(0.0, 1.0)),
                        );
                        out.push_str(&format!(
                            "<path d=\"M{mid:.1} {ylo:.1}V{yhi:.1}M{:.1} {ylo:.1}h8M{:.1} {yhi:.1}h8\" stroke=\"#333\"/>\n",
                            mid - 4.0,
                            mid - 4.0
                        ));
                    }
                }
            }
            // One sweep parameter per line (two at most), each cut to the group's width, so
            // that neighbouring labels never run into each other.
            let fits = ((group_w / 6.5) as usize).max(6);
            let lines: Vec<String> = category
                .split(' ')
                .take(2)
                .map(|part| part.chars().take(fits).collect())
                .collect();
            for (li, line) in lines.iter().enumerate() {
                out.push_str(&format!(
                    "<text x=\"{centre:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{}</text>\n",
                    plot_y(0.0) + 16.0 + 13.0 * li as f64,
                    escape(line)
                ));
            }
        }
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            (plot_x(0.0) + plot_x(1.0)) / 2.0,
            HEIGHT - 14.0,
            escape(&self.category_label)
        ));
        let entries: Vec<(String, &str)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.0.clone(), colour(i)))
            .collect();
        legend(&mut out, &entries);
        out.push_str("</svg>\n");
        out
    }
}

/// Most points one line of a time series is drawn with. A run of a million seconds drew a
/// 199 MB `report.html`; past this its line is the lowest and highest point of each of
/// `MAX_LINE_POINTS / 2` spans, so a spike still shows.
pub const MAX_LINE_POINTS: usize = 2000;

/// `points` (in x order) as at most [`MAX_LINE_POINTS`]: the lowest and highest of each span,
/// in x order.
pub fn downsample(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_LINE_POINTS {
        return points;
    }
    let per = points.len().div_ceil(MAX_LINE_POINTS / 2);
    let mut out = Vec::with_capacity(MAX_LINE_POINTS);
    for span in points.chunks(per) {
        let by_y = |a: &&(f64, f64), b: &&(f64, f64)| a.1.total_cmp(&b.1);
        let (Some(&lo), Some(&hi)) = (span.iter().min_by(by_y), span.iter().max_by(by_y)) else {
            continue;
        };
        let pair = if lo.0 <= hi.0 { [lo, hi] } else { [hi, lo] };
        out.extend(pair.into_iter().take(if lo == hi { 1 } else { 2 }));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_line_is_drawn_from_its_lows_and_highs_in_order() {
        let mut points: Vec<(f64, f64)> = (0..1_000_000).map(|i| (i as f64, 10.0)).collect();
        points[777_777].1 = 5000.0; // one spike
        points[123_456].1 = 0.0; // one dip
        let drawn = downsample(points);
        assert!(drawn.len() <= MAX_LINE_POINTS, "{}", drawn.len());
        assert!(drawn.windows(2).all(|w| w[0].0 <= w[1].0), "in x order");
        assert!(drawn.contains(&(777_777.0, 5000.0)) && drawn.contains(&(123_456.0, 0.0)));
        let short: Vec<(f64, f64)> = (0..100).map(|i| (i as f64, i as f64)).collect();
        assert_eq!(
            downsample(short.clone()),
            short,
            "a short line is drawn as it is"
        );
    }

    use super::*;

    #[test]
    fn linear_ticks_are_round_and_cover_the_range() {
        let a = Axis::fitted("x", Scale::Linear, &[0.0, 9.3], |v| format!("{v}"));
        let t: Vec<f64> = a.tick_values().into_iter().map(|t| t.0).collect();
        assert_eq!(t, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        // Whole counts from 0 to 2: no 0.5 steps labelled "0, 0, 1, 2, 2".
        let counts = Axis::fitted("y", Scale::Linear, &[0.0, 2.0], |v| format!("{v:.0}"));
        let labels: Vec<String> = counts.tick_values().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0", "1", "2"]);
    }

    #[test]
    fn log_axes_span_whole_decades() {
        let a = Axis::fitted("y", Scale::Log, &[3e3, 4e6], |v| format!("{v}"));
        assert_eq!((a.min, a.max), (1e3, 1e7));
        assert!(a.fraction(1e5) > 0.49 && a.fraction(1e5) < 0.51);
    }

    #[test]
    fn long_legend_entries_wrap_at_spaces() {
        assert_eq!(
            wrap("every=1000us capacity=64 pin=producer=0 consumer=1", 28),
            vec!["every=1000us capacity=64", "pin=producer=0 consumer=1"]
        );
        assert_eq!(wrap("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
    }

    #[test]
    fn text_is_escaped() {
        let c = LineChart {
            title: "a < b & c".into(),
            x: Axis::fitted("x", Scale::Linear, &[1.0], |v| format!("{v}")),
            y: Axis::fitted("y", Scale::Linear, &[1.0], |v| format!("{v}")),
            series: vec![],
            callouts: vec![],
            threshold: None,
        };
        let svg = c.render("t");
        assert!(svg.contains("a &lt; b &amp; c") && !svg.contains("a < b"));
    }
}
