//! `bench.svg`: measured utilization and target against time, written by hand as a
//! self-contained SVG (no plotting dependency, no scripts, no external fonts);
//! [`Plot::of`] takes what to draw from a [`Recording`].
//!
//! Layout: a fixed 960x420 canvas, the y axis fixed at 0-100 %, the x axis from 0 to
//! the last time plotted, rounded up to a tick. Shaded spans (the yield test) lie
//! under the lines; utilization is one `<polyline id="util">` point per NVML sample,
//! the target a stepped `<polyline id="target">`.

use std::fmt::Write as _;

use gpufill_core::Time;

use super::Recording;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// What to draw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plot {
    /// Title above the plot.
    pub title: String,
    /// What the utilization line is: `measured (NVML)` on a GPU, `simulated (model)`
    /// with `--sim`.
    pub util_label: &'static str,
    /// Utilization: (seconds, percent), one per sample.
    pub util: Vec<(f64, f64)>,
    /// The target: (seconds, percent) at each tick or change; drawn as steps.
    pub target: Vec<(f64, f64)>,
    /// Spans to shade, (from s, to s, label).
    pub shaded: Vec<(f64, f64, String)>,
}

impl Plot {
    /// The plot of `rec`, a bench of `gpu`: the samples, the target, the yield test
    /// shaded; `simulated` names the utilization line as the model's.
    pub fn of(gpu: &str, rec: &Recording, simulated: bool) -> Plot {
        let secs = |t: Time| t.saturating_since(rec.start).as_secs_f64();
        Plot {
            title: format!("gpufill bench: {gpu}"),
            util_label: if simulated {
                "simulated (model)"
            } else {
                "measured (NVML)"
            },
            util: rec
                .ticks
                .iter()
                .filter_map(|t| t.sample.map(|s| (secs(t.at), s.percent())))
                .collect(),
            target: rec
                .ticks
                .iter()
                .map(|t| (secs(t.at), t.target.percent()))
                .collect(),
            shaded: rec
                .yield_test
                .iter()
                .map(|(_, _, from, to)| (secs(*from), secs(*to), "yield test".to_owned()))
                .collect(),
        }
    }
}

/// Maps data onto the canvas.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Scale {
    x_max: f64,
}

impl Scale {
    fn for_plot(plot: &Plot) -> Scale {
        let last = plot
            .util
            .iter()
            .chain(&plot.target)
            .map(|p| p.0)
            .chain(plot.shaded.iter().map(|s| s.1))
            .filter(|x| x.is_finite())
            .fold(0.0, f64::max);
        let step = nice_step(last);
        Scale {
            x_max: ((last / step).ceil() * step).max(step),
        }
    }

    fn x(&self, seconds: f64) -> f64 {
        let frac = (seconds / self.x_max).clamp(0.0, 1.0);
        LEFT + frac * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, percent: f64) -> f64 {
        let frac = (percent / 100.0).clamp(0.0, 1.0);
        HEIGHT - BOTTOM - frac * (HEIGHT - TOP - BOTTOM)
    }
}

/// A tick step of 1, 2 or 5 times a power of ten giving at most 10 ticks over `span`
/// (1 for an empty or degenerate span).
fn nice_step(span: f64) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / 10.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// Escapes text for XML content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// The plot as an SVG document.
pub fn render(plot: &Plot) -> String {
    let scale = Scale::for_plot(plot);
    let mut svg = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r##"<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        escape(&plot.title)
    );
    shades(&mut svg, plot, scale);
    axes(&mut svg, scale);
    lines(&mut svg, plot, scale);
    legend(&mut svg, plot.util_label);
    if plot.util.is_empty() {
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">no samples</text>"#,
            WIDTH / 2.0,
            HEIGHT / 2.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn shades(svg: &mut String, plot: &Plot, scale: Scale) {
    for (from, to, label) in &plot.shaded {
        let (x0, x1) = (scale.x(*from), scale.x(*to));
        let _ = writeln!(
            svg,
            r##"<rect class="shade" x="{x0:.1}" y="{TOP}" width="{:.1}" height="{}" fill="#f4c7a1" fill-opacity="0.5"><title>{}</title></rect>"##,
            (x1 - x0).max(0.0),
            HEIGHT - TOP - BOTTOM,
            escape(label)
        );
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{}" text-anchor="middle" fill="#a0522d">{}</text>"##,
            (x0 + x1) / 2.0,
            TOP + 14.0,
            escape(label)
        );
    }
}

fn axes(svg: &mut String, scale: Scale) {
    let (x0, x1) = (scale.x(0.0), scale.x(scale.x_max));
    let (y0, y1) = (scale.y(0.0), scale.y(100.0));
    for pct in (0..=100).step_by(20) {
        let y = scale.y(f64::from(pct));
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#dddddd"/><text x="{}" y="{:.1}" text-anchor="end">{pct}</text>"##,
            x0 - 6.0,
            y + 4.0
        );
    }
    let step = nice_step(scale.x_max);
    let ticks = (scale.x_max / step).round() as u32;
    for i in 0..=ticks {
        let t = f64::from(i) * step;
        let x = scale.x(t);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{}" stroke="#333333"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            y0 + 5.0,
            y0 + 18.0,
            trim(t)
        );
    }
    let _ = writeln!(
        svg,
        r##"<path d="M{x0} {y1} V{y0} H{x1}" fill="none" stroke="#333333"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">time (s)</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 10.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">utilization (%)</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0
    );
}

/// A tick label: integers without decimals, others with as few as needed.
fn trim(t: f64) -> String {
    let s = format!("{t:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn lines(svg: &mut String, plot: &Plot, scale: Scale) {
    let target: Vec<String> = steps(&plot.target)
        .iter()
        .map(|&(t, pct)| format!("{:.1},{:.1}", scale.x(t), scale.y(pct)))
        .collect();
    let util: Vec<String> = plot
        .util
        .iter()
        .map(|&(t, pct)| format!("{:.1},{:.1}", scale.x(t), scale.y(pct)))
        .collect();
    let _ = writeln!(
        svg,
        r##"<polyline id="target" points="{}" fill="none" stroke="#888888" stroke-width="1.5" stroke-dasharray="6 3"/>"##,
        target.join(" ")
    );
    let _ = writeln!(
        svg,
        r##"<polyline id="util" points="{}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>"##,
        util.join(" ")
    );
}

/// The corners of a step line through `points`: each change of value becomes a
/// vertical segment at the time of the change.
fn steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for &(t, value) in points {
        match out.last() {
            None => out.push((t, value)),
            Some(&(_, previous)) if previous != value => {
                out.push((t, previous));
                out.push((t, value));
            }
            Some(_) => {}
        }
    }
    if let (Some(&last), Some(&end)) = (out.last(), points.last())
        && last != end
    {
        out.push(end);
    }
    out
}

fn legend(svg: &mut String, util_label: &str) {
    let x = WIDTH - RIGHT - 260.0;
    let _ = writeln!(
        svg,
        r##"<g transform="translate({x} 8)"><line x1="0" y1="10" x2="24" y2="10" stroke="#1f77b4" stroke-width="1.5"/><text x="30" y="14">{util_label}</text><line x1="150" y1="10" x2="174" y2="10" stroke="#888888" stroke-width="1.5" stroke-dasharray="6 3"/><text x="180" y="14">target</text></g>"##
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(svg: &str, id: &str) -> Vec<(f64, f64)> {
        let doc = roxmltree::Document::parse(svg).expect("valid XML");
        let node = doc
            .descendants()
            .find(|n| n.attribute("id") == Some(id))
            .expect("polyline");
        node.attribute("points")
            .unwrap_or("")
            .split_whitespace()
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn scales_time_onto_the_plot_width_and_percent_onto_its_height() {
        let plot = Plot {
            util: vec![(0.0, 0.0), (5.0, 50.0), (10.0, 100.0)],
            ..Plot::default()
        };
        let p = points(&render(&plot), "util");
        assert_eq!(p.len(), 3);
        assert_eq!(p[0], (LEFT, HEIGHT - BOTTOM));
        assert_eq!(p[2], (WIDTH - RIGHT, TOP));
        assert!((p[1].0 - (LEFT + WIDTH - RIGHT) / 2.0).abs() < 0.1);
        assert!((p[1].1 - (TOP + HEIGHT - BOTTOM) / 2.0).abs() < 0.1);
    }

    #[test]
    fn the_legend_says_what_the_utilization_line_is() {
        for label in ["measured (NVML)", "simulated (model)"] {
            let plot = Plot {
                util_label: label,
                util: vec![(0.0, 10.0), (1.0, 10.0)],
                ..Plot::default()
            };
            assert!(
                render(&plot).contains(&format!(">{label}</text>")),
                "{label}"
            );
        }
    }

    #[test]
    fn the_time_axis_ends_on_a_round_tick_past_the_last_point() {
        let plot = Plot {
            util: vec![(0.0, 10.0), (87.3, 10.0)],
            ..Plot::default()
        };
        assert_eq!(Scale::for_plot(&plot).x_max, 90.0);
        assert_eq!(nice_step(87.3), 10.0);
        assert_eq!(nice_step(12.0), 2.0);
        assert_eq!(nice_step(0.3), 0.05);
        assert!(render(&plot).contains(">90</text>"));
    }

    #[test]
    fn out_of_range_values_stay_inside_the_axes() {
        let plot = Plot {
            util: vec![(0.0, -5.0), (1.0, 130.0)],
            ..Plot::default()
        };
        let p = points(&render(&plot), "util");
        assert_eq!(p[0].1, HEIGHT - BOTTOM);
        assert_eq!(p[1].1, TOP);
    }

    #[test]
    fn an_empty_plot_is_still_a_valid_document_with_axes() {
        let svg = render(&Plot::default());
        assert!(points(&svg, "util").is_empty());
        assert!(points(&svg, "target").is_empty());
        assert!(svg.contains("no samples"));
        assert!(svg.contains("time (s)"));
    }

    #[test]
    fn the_target_is_drawn_as_steps() {
        let plot = Plot {
            target: vec![(0.0, 10.0), (1.0, 10.0), (2.0, 50.0), (3.0, 50.0)],
            ..Plot::default()
        };
        let s = Scale::for_plot(&plot);
        let p = points(&render(&plot), "target");
        let expect = [(0.0, 10.0), (2.0, 10.0), (2.0, 50.0), (3.0, 50.0)];
        assert_eq!(p.len(), expect.len(), "{p:?}");
        for (got, (t, pct)) in p.iter().zip(expect) {
            assert!((got.0 - s.x(t)).abs() < 0.1 && (got.1 - s.y(pct)).abs() < 0.1);
        }
    }

    #[test]
    fn text_is_escaped() {
        let plot = Plot {
            title: "a <b> & \"c\" 'd'".into(),
            shaded: vec![(1.0, 2.0, "x<y & z".into())],
            ..Plot::default()
        };
        let svg = render(&plot);
        let doc = roxmltree::Document::parse(&svg).expect("valid XML");
        let texts: Vec<_> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(texts.contains(&"a <b> & \"c\" 'd'"), "{texts:?}");
        assert!(texts.contains(&"x<y & z"));
        assert_eq!(doc.descendants().filter(|n| n.has_tag_name("b")).count(), 0);
    }

    #[test]
    fn shaded_spans_lie_between_their_times() {
        let plot = Plot {
            util: vec![(0.0, 0.0), (20.0, 0.0)],
            shaded: vec![(5.0, 10.0, "yield".into())],
            ..Plot::default()
        };
        let svg = render(&plot);
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let rect = doc
            .descendants()
            .find(|n| n.attribute("class") == Some("shade"))
            .unwrap();
        let x: f64 = rect.attribute("x").unwrap().parse().unwrap();
        let w: f64 = rect.attribute("width").unwrap().parse().unwrap();
        let s = Scale::for_plot(&plot);
        assert!((x - s.x(5.0)).abs() < 0.1);
        assert!((x + w - s.x(10.0)).abs() < 0.1);
    }
}
