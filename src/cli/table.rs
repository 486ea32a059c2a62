//! A plain-text table in patronictl's (prettytable's) style, with the cluster title set into the top border.

/// patronictl's `-f tsv`: the header line, then a line per row, cells joined by tabs.
pub fn tsv(headers: &[&str], rows: &[Vec<String>]) -> String {
    std::iter::once(headers.join("\t"))
        .chain(rows.iter().map(|r| r.join("\t")))
        .map(|line| line + "\n")
        .collect()
}

/// Column alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// Headers, rows and per-column alignment.
pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table {
            headers: columns.iter().map(|(h, _)| h.to_string()).collect(),
            align: columns.iter().map(|(_, a)| *a).collect(),
            rows: Vec::new(),
        }
    }

    /// A row with one cell per column (missing cells are blank).
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// The table, every line ending in a newline; `title` replaces the start of the top border
    /// (`+ Cluster: batman (7268...) ---+----`).
    pub fn render(&self, title: Option<&str>) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .flat_map(|r| r[c].split('\n'))
                    .map(|l| l.chars().count())
                    .chain([self.headers[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let border: String = widths.iter().fold("+".to_string(), |mut s, w| {
            s.push_str(&"-".repeat(w + 2));
            s.push('+');
            s
        });
        let line = |cells: &[&str], align: &dyn Fn(usize) -> Align| {
            let mut s = "|".to_string();
            for (c, cell) in cells.iter().enumerate() {
                let pad = " ".repeat(widths[c] - cell.chars().count());
                match align(c) {
                    Align::Left => s.push_str(&format!(" {cell}{pad} |")),
                    Align::Right => s.push_str(&format!(" {pad}{cell} |")),
                }
            }
            s
        };
        let mut out = String::new();
        out.push_str(&match title {
            Some(t) => titled(&border, t),
            None => border.clone(),
        });
        out.push('\n');
        let headers: Vec<&str> = self.headers.iter().map(String::as_str).collect();
        out.push_str(&line(&headers, &|_| Align::Left));
        out.push('\n');
        out.push_str(&border);
        out.push('\n');
        // A cell of several lines makes its row as tall, and then a rule parts every row (prettytable's
        // `hrules=ALL`, which patronictl asks for when any value has a newline).
        let ruled = self.rows.iter().flatten().any(|c| c.contains('\n'));
        for (i, r) in self.rows.iter().enumerate() {
            let height = r.iter().map(|c| c.split('\n').count()).max().unwrap_or(1);
            for k in 0..height {
                let cells: Vec<&str> = r
                    .iter()
                    .map(|c| c.split('\n').nth(k).unwrap_or(""))
                    .collect();
                out.push_str(&line(&cells, &|c| self.align[c]));
                out.push('\n');
            }
            if ruled && i + 1 < self.rows.len() {
                out.push_str(&border);
                out.push('\n');
            }
        }
        out.push_str(&border);
        out.push('\n');
        out
    }
}

/// `+ <title> ` laid over the border, which keeps its tail; a title longer than the border ends the line.
fn titled(border: &str, title: &str) -> String {
    let head = format!("+ {title} ");
    let n = head.chars().count();
    if n + 1 >= border.chars().count() {
        return format!("{head}+");
    }
    let tail: String = border.chars().skip(n).collect();
    format!("{head}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_with_a_title_in_the_border() {
        let mut t = Table::new(&[("Member", Align::Left), ("TL", Align::Right)]);
        t.row(vec!["pg1".into(), "3".into()]);
        t.row(vec!["pg22".into()]);
        let out = t.render(Some("Cluster: b"));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "+ Cluster: b -+");
        assert_eq!(lines[1], "| Member | TL |");
        assert_eq!(lines[3], "| pg1    |  3 |");
        assert_eq!(lines[4], "| pg22   |    |");
        assert_eq!(lines[5], "+--------+----+");
        assert!(t
            .render(Some("Cluster: a much longer title"))
            .starts_with("+ Cluster: a much longer title +\n"));
    }

    #[test]
    fn a_cell_of_several_lines_makes_its_row_tall_and_rules_every_row() {
        let mut t = Table::new(&[("Member", Align::Left), ("Tags", Align::Left)]);
        t.row(vec!["pg1".into(), "a: 1\nzone: b".into()]);
        t.row(vec!["pg2".into(), String::new()]);
        assert_eq!(
            t.render(None),
            "+--------+---------+\n\
             | Member | Tags    |\n\
             +--------+---------+\n\
             | pg1    | a: 1    |\n\
             |        | zone: b |\n\
             +--------+---------+\n\
             | pg2    |         |\n\
             +--------+---------+\n"
        );
    }
}
