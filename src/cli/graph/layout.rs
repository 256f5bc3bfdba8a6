//! The graph page's layout, computed here so the page draws without any layout code: layered
//! left → right, a node's column being the longest path from a root (parents strictly left of
//! children), the order within a column chosen by barycentre sweeps (each node moves towards the
//! mean height of its neighbours, which untangles most crossings), columns centred vertically.

/// Card height, gaps and padding, in SVG pixels.
pub const CARD_H: f64 = 52.0;
const GAP_X: f64 = 96.0;
const GAP_Y: f64 = 22.0;
const PAD: f64 = 32.0;
/// Sweeps of the barycentre ordering (each one down then up).
const SWEEPS: usize = 6;

/// Height of the slot an edge takes where it crosses a column.
const BEND_H: f64 = 8.0;

/// Where every node goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// Column of each node: the longest path from a root.
    pub layer: Vec<usize>,
    /// Position of each node within its column, from the top (edges crossing the column count).
    pub row: Vec<usize>,
    /// Top-left corner of each node's card.
    pub x: Vec<f64>,
    /// Top-left corner of each node's card.
    pub y: Vec<f64>,
    /// Card width (the same for every node).
    pub card_w: f64,
    /// The drawing's size.
    pub width: f64,
    /// The drawing's size.
    pub height: f64,
    /// Edges spanning several columns: where they cross each column between their ends
    /// (left x, centre y), so they run between the cards rather than across them.
    pub bends: std::collections::BTreeMap<(usize, usize), Vec<(f64, f64)>>,
}

impl Layout {
    /// Number of columns.
    pub fn layers(&self) -> usize {
        self.layer.iter().max().map_or(0, |l| l + 1)
    }

    /// The SVG path of the edge from node `from`'s right side to node `to`'s left side, through
    /// its bends.
    pub fn edge_path(&self, from: usize, to: usize) -> String {
        let mut points = vec![(self.x[from] + self.card_w, self.y[from] + CARD_H / 2.0)];
        for &(x, y) in self.bends.get(&(from, to)).into_iter().flatten() {
            points.push((x, y));
            points.push((x + self.card_w, y));
        }
        points.push((self.x[to], self.y[to] + CARD_H / 2.0));
        let mut d = format!("M{:.1},{:.1}", points[0].0, points[0].1);
        // Curves across the gaps between columns, straight lines across the columns.
        for (i, pair) in points.windows(2).enumerate() {
            let ((x1, y1), (x2, y2)) = (pair[0], pair[1]);
            if i % 2 == 0 {
                let dx = ((x2 - x1) / 2.0).max(24.0);
                d.push_str(&format!(" C{:.1},{y1:.1} {:.1},{y2:.1} {x2:.1},{y2:.1}", x1 + dx, x2 - dx));
            } else {
                d.push_str(&format!(" L{x2:.1},{y2:.1}"));
            }
        }
        d
    }
}

/// Lays out `n` nodes given in topological order, `edges` being `(parent, child)` indexes
/// (a parent's index below its child's); `card_w` is the card width.
///
/// An edge spanning several columns gets a virtual node in each column it crosses (Sugiyama's
/// method), ordered with the cards, so it is routed between them.
pub fn layered(n: usize, edges: &[(usize, usize)], card_w: f64) -> Layout {
    let mut layer = vec![0usize; n];
    {
        let mut parents: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &(p, c) in edges {
            parents[c].push(p);
        }
        for c in 0..n {
            layer[c] = parents[c].iter().map(|&p| layer[p] + 1).max().unwrap_or(0);
        }
    }
    // Nodes and virtual nodes (indexes from `n` on), with their columns and adjacency.
    let mut all_layer = layer.clone();
    let mut parents: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut chains: Vec<((usize, usize), Vec<usize>)> = Vec::new();
    for &(p, c) in edges {
        let mut prev = p;
        let mut chain = Vec::new();
        for l in layer[p] + 1..layer[c] {
            let v = all_layer.len();
            all_layer.push(l);
            parents.push(vec![prev]);
            children.push(Vec::new());
            children[prev].push(v);
            chain.push(v);
            prev = v;
        }
        parents[c].push(prev);
        children[prev].push(c);
        if !chain.is_empty() {
            chains.push(((p, c), chain));
        }
    }
    let total = all_layer.len();
    let height = |i: usize| if i < n { CARD_H } else { BEND_H };
    let columns = layer.iter().max().map_or(0, |l| l + 1);
    let mut cols: Vec<Vec<usize>> = vec![Vec::new(); columns];
    for (i, &l) in all_layer.iter().enumerate() {
        cols[l].push(i);
    }
    let extent = |col: &[usize]| col.iter().map(|&i| height(i)).sum::<f64>() + col.len().saturating_sub(1) as f64 * GAP_Y;
    let tallest = cols.iter().map(|c| extent(c)).fold(0.0f64, f64::max);
    // `y` holds the centre of each node while ordering.
    let mut y = vec![0.0f64; total];
    let place = |col: &[usize], y: &mut [f64]| {
        let mut top = PAD + (tallest - extent(col)) / 2.0;
        for &i in col {
            y[i] = top + height(i) / 2.0;
            top += height(i) + GAP_Y;
        }
    };
    for col in &cols {
        place(col, &mut y);
    }
    let mean = |ns: &[usize], y: &[f64]| (!ns.is_empty()).then(|| ns.iter().map(|&k| y[k]).sum::<f64>() / ns.len() as f64);
    for sweep in 0..SWEEPS {
        for col in cols.iter_mut().skip(1) {
            let keys: Vec<(f64, usize)> = col.iter().map(|&i| (mean(&parents[i], &y).unwrap_or(y[i]), i)).collect();
            *col = sorted(keys, &y);
            place(col, &mut y);
        }
        // The last sweep ends going down: children follow their parents.
        if sweep + 1 == SWEEPS {
            break;
        }
        for col in cols.iter_mut().rev().skip(1) {
            let keys: Vec<(f64, usize)> = col.iter().map(|&i| (mean(&children[i], &y).unwrap_or(y[i]), i)).collect();
            *col = sorted(keys, &y);
            place(col, &mut y);
        }
    }
    let mut row = vec![0usize; total];
    for col in &cols {
        for (r, &i) in col.iter().enumerate() {
            row[i] = r;
        }
    }
    let column_x = |l: usize| PAD + l as f64 * (card_w + GAP_X);
    let bends = chains.into_iter().map(|(edge, chain)| (edge, chain.iter().map(|&v| (column_x(all_layer[v]), y[v])).collect())).collect();
    row.truncate(n);
    let x: Vec<f64> = layer.iter().map(|&l| column_x(l)).collect();
    let top: Vec<f64> = y[..n].iter().map(|c| c - CARD_H / 2.0).collect();
    let width = 2.0 * PAD + columns as f64 * card_w + columns.saturating_sub(1) as f64 * GAP_X;
    Layout { layer, row, x, y: top, card_w, width, height: 2.0 * PAD + tallest, bends }
}

/// Nodes ordered by key, ties kept in their current order (by current height).
fn sorted(mut keys: Vec<(f64, usize)>, y: &[f64]) -> Vec<usize> {
    keys.sort_by(|a, b| a.0.total_cmp(&b.0).then(y[a.1].total_cmp(&y[b.1])));
    keys.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs of edges whose ends are in the same two adjacent columns and cross.
    fn crossings(l: &Layout, edges: &[(usize, usize)]) -> usize {
        let mut n = 0;
        for (i, &(a, b)) in edges.iter().enumerate() {
            for &(c, d) in &edges[i + 1..] {
                if l.layer[a] == l.layer[c] && l.layer[b] == l.layer[d] && (l.row[a] as i64 - l.row[c] as i64) * (l.row[b] as i64 - l.row[d] as i64) < 0 {
                    n += 1;
                }
            }
        }
        n
    }

    #[test]
    fn columns_are_longest_paths_and_parents_sit_left_of_children() {
        // 0 → 1 → 2, 0 → 2, 3 alone, 3 → 4.
        let edges = [(0, 1), (1, 2), (0, 2), (3, 4)];
        let l = layered(5, &edges, 200.0);
        assert_eq!(l.layer, [0, 1, 2, 0, 1]);
        assert_eq!(l.layers(), 3);
        for &(p, c) in &edges {
            assert!(l.x[p] + l.card_w < l.x[c], "{p} → {c}: {l:?}");
        }
        // No two cards of a column overlap, and everything is inside the drawing.
        for a in 0..5 {
            for b in a + 1..5 {
                if l.layer[a] == l.layer[b] {
                    assert!((l.y[a] - l.y[b]).abs() >= CARD_H, "{a} and {b} overlap: {l:?}");
                }
            }
            assert!(l.x[a] >= 0.0 && l.x[a] + l.card_w <= l.width && l.y[a] >= 0.0 && l.y[a] + CARD_H <= l.height + 0.001, "{l:?}");
        }
        assert!(l.edge_path(0, 1).starts_with(&format!("M{:.1},", l.x[0] + 200.0)));
    }

    #[test]
    fn long_edges_bend_between_the_cards_of_the_columns_they_cross() {
        // 0 → 1 → 2 → 3 and 0 → 3, with 4 → 5 → 6 beside: the long edge crosses columns 1 and 2.
        let edges = [(0, 1), (1, 2), (2, 3), (0, 3), (4, 5), (5, 6)];
        let l = layered(7, &edges, 150.0);
        let bends = &l.bends[&(0, 3)];
        assert_eq!(bends.len(), 2, "{l:?}");
        assert!(!l.bends.contains_key(&(0, 1)));
        for (k, &(x, y)) in bends.iter().enumerate() {
            assert_eq!(x, l.x[1 + k], "a bend sits in the column it crosses");
            for i in 0..7 {
                if l.x[i] == x {
                    assert!(y < l.y[i] || y > l.y[i] + CARD_H, "the bend at {y} runs across card {i}: {l:?}");
                }
            }
        }
        let path = l.edge_path(0, 3);
        assert_eq!(path.matches(" C").count(), 3, "{path}");
        assert_eq!(path.matches(" L").count(), 2, "{path}");
    }

    #[test]
    fn barycentre_sweeps_untangle_crossed_edges() {
        // Roots 0, 1; children 2 (of 1) and 3 (of 0): in index order the two edges cross.
        let edges = [(1, 2), (0, 3)];
        let l = layered(4, &edges, 100.0);
        assert_eq!(crossings(&l, &edges), 0, "{l:?}");
        // A wider case: 3 roots, each child reads one root, listed in reverse.
        let edges = [(0, 5), (1, 4), (2, 3)];
        let l = layered(6, &edges, 100.0);
        assert_eq!(crossings(&l, &edges), 0, "{l:?}");
    }

    #[test]
    fn an_empty_graph_has_an_empty_layout() {
        let l = layered(0, &[], 100.0);
        assert_eq!((l.layers(), l.layer.len()), (0, 0));
    }
}
