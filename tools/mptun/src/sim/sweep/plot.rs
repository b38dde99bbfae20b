//! A sweep's figure over one axis: the mean at each value, its 95 %
//! confidence interval as an error bar, a line per combination of the
//! other axes.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::Summary;
use crate::plot::{register_font, COLOURS};

/// A line of the plot: its label and (x index, mean, CI half-width) points.
type Series = (String, Vec<(usize, f64, f64)>);

pub(crate) fn figure_over(path: &Path, summary: &Summary, keys: &[String], x: &str, figure: &str) -> Result<()> {
    register_font()?;
    let xi = keys.iter().position(|k| k == x).ok_or_else(|| anyhow!("{x}: not an axis"))?;
    // The axis' values in the grid's order; one series per value of the rest.
    let mut xs: Vec<String> = Vec::new();
    let mut series: Vec<Series> = Vec::new();
    for (point, stats) in summary {
        let Some(s) = stats.get(figure) else { continue };
        if !xs.contains(&point[xi]) {
            xs.push(point[xi].clone());
        }
        let at = xs.iter().position(|v| v == &point[xi]).expect("just added");
        let label: Vec<String> = keys
            .iter()
            .zip(point)
            .enumerate()
            .filter(|(i, _)| *i != xi)
            .map(|(_, (k, v))| format!("{k}={v}"))
            .collect();
        let label = if label.is_empty() { figure.to_string() } else { label.join(" ") };
        match series.iter_mut().find(|(l, _)| *l == label) {
            Some((_, pts)) => pts.push((at, s.mean, s.ci95)),
            None => series.push((label, vec![(at, s.mean, s.ci95)])),
        }
    }
    if xs.is_empty() {
        return Err(anyhow!("{figure}: no run has this figure"));
    }
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let lo = pts.clone().map(|&(_, m, c)| m - c).fold(f64::INFINITY, f64::min).min(0.0);
    let hi = pts.map(|&(_, m, c)| m + c).fold(f64::NEG_INFINITY, f64::max);
    let hi = if hi > lo { hi + (hi - lo) * 0.1 } else { lo + 1.0 };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let n = xs.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{figure} over {x} (mean, 95 % CI)"), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), lo..hi)
        .map_err(|e| anyhow!("{e:?}"))?;
    let labels = xs.clone();
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&move |v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc(x)
        .y_desc(figure)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (k, (label, pts)) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        // A small offset per series so that error bars at one x do not hide each other.
        let dx = (k as f64 - (series.len() as f64 - 1.0) / 2.0) * 0.04;
        chart
            .draw_series(LineSeries::new(pts.iter().map(|&(i, m, _)| (i as f64 + dx, m)), colour.stroke_width(2)))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        chart
            .draw_series(
                pts.iter().map(|&(i, m, c)| ErrorBar::new_vertical(i as f64 + dx, m - c, m, m + c, colour.filled(), 8)),
            )
            .map_err(|e| anyhow!("{e:?}"))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}
