//! SVG plots of simulator traces (plotters, SVG backend, with an embedded
//! DejaVu font so a plot renders the same on a machine without fonts).

use anyhow::{anyhow, Result};
use mptun_sim::scenarios::network::{FlowReport, FlowSample};
use mptun_sim::scenarios::transfer::SubflowSample;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

pub(crate) fn register_font() -> Result<()> {
    static ONCE: Once = Once::new();
    let mut res = Ok(());
    ONCE.call_once(|| {
        res = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| anyhow!("could not load the embedded font"));
    });
    res
}

pub(crate) const COLOURS: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(214, 39, 40)];

/// cwnd of every subflow over time, one panel per labelled run, with each
/// slow-subflow halving marked by a cross on the curve of the subflow it hit.
pub(crate) fn cwnd_panels(path: &Path, title: &str, runs: &[(String, Vec<SubflowSample>)]) -> Result<()> {
    register_font()?;
    let height = 320 * runs.len().max(1) as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| anyhow!("{e:?}"))?;
    let panels = root.split_evenly((runs.len().max(1), 1));
    for ((label, samples), area) in runs.iter().zip(panels.iter()) {
        let t_max = samples.iter().map(|s| s.t_s).fold(0.1, f64::max);
        let w_max = samples.iter().map(|s| s.cwnd).max().unwrap_or(10) as f64 * 1.1;
        let mut chart = time_chart(area, label, "cwnd (packets)", t_max, w_max)?;
        let mut ids: Vec<usize> = samples.iter().map(|s| s.subflow).collect();
        ids.sort_unstable();
        ids.dedup();
        for (k, id) in ids.iter().enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            let pts: Vec<&SubflowSample> = samples.iter().filter(|s| s.subflow == *id).collect();
            draw_line(&mut chart, pts.iter().map(|s| (s.t_s, s.cwnd as f64)), colour, format!("subflow {id}"))?;
            let halvings =
                pts.windows(2).filter(|w| w[1].penalized > w[0].penalized).map(|w| (w[1].t_s, w[1].cwnd as f64));
            chart
                .draw_series(halvings.map(|p| Cross::new(p, 4, BLACK.stroke_width(1))))
                .map_err(|e| anyhow!("{e:?}"))?;
        }
        draw_legend(&mut chart)?;
    }
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

/// A network run over time: each flow's goodput (what B received between
/// samples) in one panel, each subflow's cwnd in the other.
pub(crate) fn flow_panels(path: &Path, title: &str, flows: &[FlowReport], samples: &[FlowSample]) -> Result<()> {
    register_font()?;
    let root = SVGBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| anyhow!("{e:?}"))?;
    let panels = root.split_evenly((2, 1));
    let t_max = samples.iter().map(|s| s.t_s).fold(0.1, f64::max);
    let label =
        |i: usize| flows.get(i).map_or_else(|| format!("flow {i}"), |f| format!("flow {i} ({} {})", f.kind, f.cc));
    // Goodput per flow.
    let series: Vec<(String, Vec<(f64, f64)>)> = (0..flows.len())
        .map(|i| (label(i), crate::traces::flow_goodput(samples, i).into_iter().map(|(t, b)| (t, b / 1e6)).collect()))
        .collect();
    line_panel(&panels[0], "goodput", "Mbit/s", t_max, &series)?;
    // cwnd per subflow.
    let mut keys: Vec<(usize, usize)> =
        samples.iter().flat_map(|s| s.subflows.iter().map(move |sf| (s.flow, sf.subflow))).collect();
    keys.sort_unstable();
    keys.dedup();
    let series: Vec<(String, Vec<(f64, f64)>)> = keys
        .iter()
        .map(|&(fl, sf)| {
            let pts = samples
                .iter()
                .filter(|s| s.flow == fl)
                .flat_map(|s| s.subflows.iter().filter(|x| x.subflow == sf).map(move |x| (s.t_s, f64::from(x.cwnd))))
                .collect();
            (format!("{} subflow {sf}", label(fl)), pts)
        })
        .collect();
    line_panel(&panels[1], "congestion window", "cwnd (packets)", t_max, &series)?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

/// A chart of values over time in seconds.
type TimeChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// One labelled line of `chart`, in `colour`, with its legend entry.
fn draw_line(
    chart: &mut TimeChart<'_, '_>,
    pts: impl IntoIterator<Item = (f64, f64)>,
    colour: RGBColor,
    label: String,
) -> Result<()> {
    chart
        .draw_series(LineSeries::new(pts, colour.stroke_width(1)))
        .map_err(|e| anyhow!("{e:?}"))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    Ok(())
}

/// The legend of `chart`'s labelled lines.
fn draw_legend<'a, 'b: 'a>(chart: &mut TimeChart<'a, 'b>) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))
}

/// A chart over time, 0..`t_max` s by 0..`y_max` in `unit`, its mesh drawn.
fn time_chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: &str,
    unit: &str,
    t_max: f64,
    y_max: f64,
) -> Result<TimeChart<'a, 'b>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart.configure_mesh().x_desc("time (s)").y_desc(unit).draw().map_err(|e| anyhow!("{e:?}"))?;
    Ok(chart)
}

/// One panel of labelled lines over time.
fn line_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    unit: &str,
    t_max: f64,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    let y_max = series.iter().flat_map(|(_, p)| p.iter().map(|&(_, y)| y)).fold(1e-3, f64::max) * 1.1;
    let mut chart = time_chart(area, caption, unit, t_max, y_max)?;
    for (k, (label, pts)) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        draw_line(&mut chart, pts.iter().copied(), colour, label.clone())?;
    }
    draw_legend(&mut chart)?;
    Ok(())
}

/// cwnd, throughput and srtt of every subflow over time, one panel each,
/// with slow-subflow halvings marked by crosses (on every panel, at the
/// subflow's value then).
pub(crate) fn subflow_panels(path: &Path, title: &str, samples: &[SubflowSample]) -> Result<()> {
    register_font()?;
    let rows = crate::traces::rows(samples);
    let root = SVGBackend::new(path, (900, 1200)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| anyhow!("{e:?}"))?;
    let panels = root.split_evenly((4, 1));
    let t_max = samples.iter().map(|s| s.t_s).fold(0.1, f64::max);
    let mut ids: Vec<usize> = samples.iter().map(|s| s.subflow).collect();
    ids.sort_unstable();
    ids.dedup();
    type Metric = (&'static str, &'static str, fn(&crate::traces::Row<'_>) -> f64);
    let metrics: [Metric; 4] = [
        ("congestion window", "cwnd (packets)", |r| f64::from(r.s.cwnd)),
        ("throughput (bytes_acked deltas)", "Mbit/s", |r| r.throughput_bps / 1e6),
        ("smoothed RTT", "srtt (ms)", |r| r.s.srtt_us as f64 / 1e3),
        ("receiver MPTcpExtOFOQueue (cumulative)", "segments", |r| r.s.receiver_ofo_queue as f64),
    ];
    for ((caption, unit, f), area) in metrics.iter().zip(panels.iter()) {
        let y_max = rows.iter().map(f).fold(1e-3, f64::max) * 1.1;
        let mut chart = time_chart(area, caption, unit, t_max, y_max)?;
        for (k, id) in ids.iter().enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            let pts: Vec<&crate::traces::Row<'_>> = rows.iter().filter(|r| r.s.subflow == *id).collect();
            draw_line(&mut chart, pts.iter().map(|r| (r.s.t_s, f(r))), colour, format!("subflow {id}"))?;
            let marks = pts.windows(2).filter(|w| w[1].s.penalized > w[0].s.penalized).map(|w| (w[1].s.t_s, f(w[1])));
            chart.draw_series(marks.map(|p| Cross::new(p, 4, BLACK.stroke_width(1)))).map_err(|e| anyhow!("{e:?}"))?;
        }
        draw_legend(&mut chart)?;
    }
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}
