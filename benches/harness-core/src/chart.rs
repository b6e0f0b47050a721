//! chart.svg: ops/s per step, one bar per engine/setup, on a log scale.

use std::path::Path;

use plotters::prelude::*;

use crate::report::Row;
use crate::table::{labels, sig3, step_names};

const COLORS: [RGBColor; 12] = [
    RGBColor(0x1b, 0x9e, 0x77),
    RGBColor(0xd9, 0x5f, 0x02),
    RGBColor(0x75, 0x70, 0xb3),
    RGBColor(0xe7, 0x29, 0x8a),
    RGBColor(0x66, 0xa6, 0x1e),
    RGBColor(0xe6, 0xab, 0x02),
    RGBColor(0xa6, 0x76, 0x1d),
    RGBColor(0x1f, 0x78, 0xb4),
    RGBColor(0xb1, 0x59, 0x28),
    RGBColor(0x6a, 0x3d, 0x9a),
    RGBColor(0x33, 0xa0, 0x2c),
    RGBColor(0x66, 0x66, 0x66),
];

/// Bars of ops/s: x = steps (in `order`), one bar per engine/setup in each step's group.
pub fn write_chart(path: &Path, title: &str, rows: &[Row], order: &[&str]) -> Result<(), String> {
    let steps = step_names(rows, order);
    let series = labels(rows);
    let value = |label: &str, step: &str| {
        rows.iter()
            .find(|r| r.step_label() == step && r.label() == label)
            .map(|r| r.ops)
            .filter(|x| x.is_finite() && *x > 0.0)
    };
    let all: Vec<f64> = series
        .iter()
        .flat_map(|l| steps.iter().filter_map(move |s| value(l, s)))
        .collect();
    let (lo, hi) = if all.is_empty() {
        (1.0, 10.0)
    } else {
        let min = all.iter().copied().fold(f64::INFINITY, f64::min);
        let max = all.iter().copied().fold(0.0, f64::max);
        (
            10f64.powf(min.log10().floor()),
            10f64.powf((max * 1.01).log10().ceil()),
        )
    };
    let n = steps.len().max(1);
    let legend_w = 40 + 8 * series.iter().map(|s| s.len()).max().unwrap_or(8) as u32;
    let width = (70 * n as u32 + 120).max(700) + legend_w;
    let height = 480;
    let err = |e: &dyn std::fmt::Display| format!("chart: {e}");

    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (plot, legend) = root.split_horizontally(width - legend_w);
    let mut chart = ChartBuilder::on(&plot)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, (lo..hi).log_scale())
        .map_err(|e| err(&e))?;
    let ops_label = |y: &f64| sig3(*y);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&ops_label)
        .y_desc("ops/s (log scale)")
        .draw()
        .map_err(|e| err(&e))?;
    let k = series.len().max(1) as f64;
    let bar = 0.84 / k;
    for (j, label) in series.iter().enumerate() {
        let color = COLORS[j % COLORS.len()];
        let bars = steps.iter().enumerate().filter_map(|(i, step)| {
            let v = value(label, step)?;
            let x0 = i as f64 + 0.08 + j as f64 * bar;
            Some(Rectangle::new(
                [(x0, lo), (x0 + bar * 0.9, v)],
                color.filled(),
            ))
        });
        chart.draw_series(bars).map_err(|e| err(&e))?;
    }
    // Step names under each group (drawn on the root: the mesh has no categorical axis).
    for (i, step) in steps.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, lo));
        let w = 7 * step.len() as i32;
        root.draw(&Text::new(
            step.clone(),
            (px - w / 2, py + 8),
            ("sans-serif", 13).into_font(),
        ))
        .map_err(|e| err(&e))?;
    }
    for (j, label) in series.iter().enumerate() {
        let color = COLORS[j % COLORS.len()];
        let y = 40 + 22 * j as i32;
        legend
            .draw(&Rectangle::new([(8, y), (22, y + 14)], color.filled()))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(
                label.clone(),
                (28, y + 1),
                ("sans-serif", 13).into_font(),
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The insert benchmark's curve: rows/s of each tenth of `ib.l.i1` (x: tenth 1..10), one line
/// per engine/setup and `ib.l.i1*` step, on a log scale. Nothing is written when no row has
/// tenths.
pub fn write_tenths_chart(path: &Path, title: &str, rows: &[Row]) -> Result<bool, String> {
    let series: Vec<(String, Vec<(f64, f64)>)> = rows
        .iter()
        .filter_map(|r| {
            let t = r.tenths.as_ref()?;
            let pts: Vec<(f64, f64)> = t
                .iter()
                .enumerate()
                .filter(|(_, y)| y.is_finite() && **y > 0.0)
                .map(|(k, y)| (k as f64 + 1.0, *y))
                .collect();
            let name = if r.step == "ib.l.i1" {
                r.label()
            } else {
                format!("{} {}", r.label(), r.step.trim_start_matches("ib.l.i1."))
            };
            (!pts.is_empty()).then_some((name, pts))
        })
        .collect();
    if series.is_empty() {
        return Ok(false);
    }
    let ys = series.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y));
    let min = ys.clone().fold(f64::INFINITY, f64::min);
    let max = ys.fold(0.0, f64::max);
    let (lo, hi) = (
        10f64.powf(min.log10().floor()),
        10f64.powf((max * 1.01).log10().ceil()),
    );
    let legend_w = 40 + 8 * series.iter().map(|s| s.0.len()).max().unwrap_or(8) as u32;
    let (width, height) = (760 + legend_w, 480);
    let err = |e: &dyn std::fmt::Display| format!("chart: {e}");
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (plot, legend) = root.split_horizontally(width - legend_w);
    let mut chart = ChartBuilder::on(&plot)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5f64..10.5, (lo..hi).log_scale())
        .map_err(|e| err(&e))?;
    let ops_label = |y: &f64| sig3(*y);
    let tenth_label = |x: &f64| format!("{x:.0}");
    chart
        .configure_mesh()
        .x_labels(10)
        .x_label_formatter(&tenth_label)
        .x_desc("tenth of the step's rows")
        .y_label_formatter(&ops_label)
        .y_desc("rows/s (log scale)")
        .draw()
        .map_err(|e| err(&e))?;
    for (j, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[j % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(|e| err(&e))?;
        let y = 40 + 22 * j as i32;
        legend
            .draw(&Rectangle::new([(8, y), (22, y + 14)], color.filled()))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(
                name.clone(),
                (28, y + 1),
                ("sans-serif", 13).into_font(),
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.svg");
        let mut rows = Vec::new();
        for (engine, ops) in [("larch", 1000.0), ("lmdb", 250_000.0)] {
            for step in ["load", "pq.1"] {
                let mut r = Row::failed(engine, "default", step, String::new());
                r.ops = ops;
                r.error = None;
                rows.push(r);
            }
        }
        rows.push(Row::failed("redb", "default", "load", "boom".into()));
        write_chart(&path, "test", &rows, &["load", "pq.1"]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("pq.1") && svg.contains("lmdb") && svg.contains("redb"));
        assert!(svg.matches("<rect").count() >= 4);

        let tenths = dir.path().join("ib.svg");
        assert!(!write_tenths_chart(&tenths, "t", &rows).unwrap());
        rows[0].step = "ib.l.i1".into();
        rows[0].tenths = Some((1..=10).map(|k| 1000.0 / k as f64).collect());
        assert!(write_tenths_chart(&tenths, "t", &rows).unwrap());
        let svg = std::fs::read_to_string(&tenths).unwrap();
        assert!(svg.contains("<polyline") || svg.contains("<path"), "{svg}");
    }
}
