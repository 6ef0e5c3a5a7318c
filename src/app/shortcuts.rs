//! Every keyboard shortcut of the window in one table: the key handling
//! walks it, the menus label their items from it and the `?` overlay lists
//! it, so what is shown cannot drift from what is handled.

use egui::{Key, KeyboardShortcut, Modifiers, RichText};

/// What a shortcut does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Show the folder picker for a bundle to compare the open one with.
    Compare,
    /// Show the folder picker.
    Open,
    /// Ask where to save the report.
    SaveReport,
    /// Close the open bundle (back to the welcome screen).
    Close,
    /// Put the cursor in the tensor filter.
    Find,
    /// Close the overlay, or clear the tensor filter.
    Escape,
    /// Spot-check every packed tensor.
    SpotCheckAll,
    /// Spot-check the selected tensor.
    SpotCheck,
    /// Copy the selected tensor's name.
    CopyName,
    /// Select the next row of the table.
    Next,
    /// Select the previous row of the table.
    Previous,
    /// Show the Tensors tab.
    TabTensors,
    /// Show the Quality tab.
    TabQuality,
    /// Show the Spot checks tab.
    TabSpotChecks,
    /// Show the Lineage tab.
    TabLineage,
    /// Show the list of shortcuts.
    Help,
    /// The NVFP4 panel's previous expert.
    PreviousExpert,
    /// The NVFP4 panel's next expert.
    NextExpert,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Shortcut {
    /// What it does.
    pub action: Action,
    /// The keys. Plain keys (no modifier) are read with `key_pressed`, so
    /// they repeat while held; the others are consumed.
    pub keys: KeyboardShortcut,
    /// Whether it also works while a text field has the keyboard (a plain
    /// `?` typed into the filter is text, Cmd+C there copies the text).
    pub while_typing: bool,
    /// What the overlay says.
    pub what: &'static str,
    /// The panel that handles it while shown (`None`: the window does,
    /// everywhere).
    pub panel: Option<&'static str>,
}

const fn cmd(key: Key) -> KeyboardShortcut {
    KeyboardShortcut::new(Modifiers::COMMAND, key)
}

const fn plain(key: Key) -> KeyboardShortcut {
    KeyboardShortcut::new(Modifiers::NONE, key)
}

const fn row(
    action: Action,
    keys: KeyboardShortcut,
    while_typing: bool,
    what: &'static str,
) -> Shortcut {
    Shortcut {
        action,
        keys,
        while_typing,
        what,
        panel: None,
    }
}

const fn in_panel(action: Action, key: Key, panel: &'static str, what: &'static str) -> Shortcut {
    Shortcut {
        action,
        keys: plain(key),
        while_typing: false,
        what,
        panel: Some(panel),
    }
}

/// Every shortcut, in the order the handler tries them. A shortcut with
/// more modifiers comes before one with fewer on the same key:
/// `consume_shortcut` ignores an extra Shift, so Cmd+K would take
/// Shift+Cmd+K otherwise (a test checks the order).
pub const SHORTCUTS: &[Shortcut] = &[
    row(
        Action::Compare,
        KeyboardShortcut::new(Modifiers::COMMAND.plus(Modifiers::SHIFT), Key::O),
        true,
        "Compare the open bundle with another",
    ),
    row(Action::Open, cmd(Key::O), true, "Open a bundle folder"),
    row(
        Action::SaveReport,
        cmd(Key::S),
        true,
        "Save the audit report (JSON)",
    ),
    row(
        Action::Close,
        cmd(Key::W),
        true,
        "Close the bundle (back to the welcome screen)",
    ),
    row(
        Action::Find,
        cmd(Key::F),
        true,
        "Filter the tensors by name",
    ),
    row(
        Action::SpotCheckAll,
        KeyboardShortcut::new(Modifiers::COMMAND.plus(Modifiers::SHIFT), Key::K),
        true,
        "Spot-check every packed tensor on MLX",
    ),
    row(
        Action::SpotCheck,
        cmd(Key::K),
        true,
        "Spot-check the selected tensor on MLX",
    ),
    row(
        Action::CopyName,
        cmd(Key::C),
        false,
        "Copy the selected tensor's name",
    ),
    row(
        Action::TabTensors,
        cmd(Key::Num1),
        true,
        "Show the Tensors tab",
    ),
    row(
        Action::TabQuality,
        cmd(Key::Num2),
        true,
        "Show the Quality tab",
    ),
    row(
        Action::TabSpotChecks,
        cmd(Key::Num3),
        true,
        "Show the Spot checks tab",
    ),
    row(
        Action::TabLineage,
        cmd(Key::Num4),
        true,
        "Show the Lineage tab",
    ),
    row(
        Action::Next,
        plain(Key::ArrowDown),
        true,
        "Select the next tensor",
    ),
    row(
        Action::Previous,
        plain(Key::ArrowUp),
        true,
        "Select the previous tensor",
    ),
    row(
        Action::Help,
        plain(Key::Questionmark),
        false,
        "Show these shortcuts",
    ),
    row(
        Action::Escape,
        plain(Key::Escape),
        true,
        "Close this list or About; otherwise clear the tensor filter",
    ),
    in_panel(
        Action::PreviousExpert,
        Key::OpenBracket,
        "NVFP4 experts",
        "Previous expert",
    ),
    in_panel(
        Action::NextExpert,
        Key::CloseBracket,
        "NVFP4 experts",
        "Next expert",
    ),
];

/// The table's row for `action` (every action has one; a test checks).
pub fn shortcut(action: Action) -> KeyboardShortcut {
    SHORTCUTS
        .iter()
        .find(|s| s.action == action)
        .map_or(plain(Key::Escape), |s| s.keys)
}

/// How the keys read on this platform: Cmd (⌘) on macOS, Ctrl elsewhere.
pub fn keys_text(ctx: &egui::Context, keys: &KeyboardShortcut) -> String {
    if keys.modifiers.is_none() {
        // `format_shortcut` spells a lone key out ("Questionmark").
        return match keys.logical_key {
            Key::Escape => "Esc".into(),
            Key::ArrowDown => "↓".into(),
            Key::ArrowUp => "↑".into(),
            k => k.symbol_or_name().into(),
        };
    }
    ctx.format_shortcut(keys)
}

/// The label of `action`'s keys, for menu items and hover texts.
pub fn text(ctx: &egui::Context, action: Action) -> String {
    keys_text(ctx, &shortcut(action))
}

/// Reads this frame's input and returns the actions the user asked for,
/// in table order. `typing`: a text field has the keyboard.
pub fn pressed(ctx: &egui::Context, typing: bool) -> Vec<Action> {
    let mut out = Vec::new();
    ctx.input_mut(|i| {
        for s in SHORTCUTS {
            if (typing && !s.while_typing) || s.panel.is_some() {
                continue;
            }
            let fired = if s.keys.modifiers.is_none() {
                i.key_pressed(s.keys.logical_key)
            } else {
                i.consume_shortcut(&s.keys)
            };
            // The platform turns Cmd/Ctrl+C into a Copy event, not a key.
            let copied = s.action == Action::CopyName
                && i.events.iter().any(|e| matches!(e, egui::Event::Copy));
            if fired || copied {
                out.push(s.action);
            }
        }
    });
    out
}

/// For a panel's own shortcut: consumes its keys when pressed (and no
/// text field has the keyboard).
pub fn consume(ctx: &egui::Context, action: Action) -> bool {
    let keys = shortcut(action);
    !ctx.text_edit_focused() && ctx.input_mut(|i| i.consume_key(keys.modifiers, keys.logical_key))
}

/// Draws the `?` overlay's list; true when it should close.
pub(super) fn overlay_ui(ctx: &egui::Context) -> bool {
    let modal = egui::Modal::new(egui::Id::unique("shortcuts-overlay")).show(ctx, |ui| {
        ui.set_min_width(420.0);
        ui.heading("Keyboard shortcuts");
        ui.add_space(6.0);
        egui::Grid::new("shortcuts-grid")
            .num_columns(2)
            .striped(true)
            .spacing([24.0, 6.0])
            .show(ui, |ui| {
                for s in SHORTCUTS {
                    ui.label(RichText::new(keys_text(ctx, &s.keys)).monospace().strong());
                    match s.panel {
                        Some(p) => ui.label(format!("{} ({p})", s.what)),
                        None => ui.label(s.what),
                    };
                    ui.end_row();
                }
            });
        ui.add_space(8.0);
        ui.label(
            RichText::new("Every chart has a PNG menu: copy it or save it for a review.").weak(),
        );
        ui.add_space(4.0);
        ui.vertical_centered(|ui| ui.button("Close").clicked())
            .inner
    });
    modal.inner || modal.should_close()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_has_one_row_and_no_keys_repeat() {
        use Action::*;
        let all = [
            Compare,
            Open,
            SaveReport,
            Close,
            Find,
            Escape,
            SpotCheckAll,
            SpotCheck,
            CopyName,
            Next,
            Previous,
            TabTensors,
            TabQuality,
            TabSpotChecks,
            TabLineage,
            Help,
            PreviousExpert,
            NextExpert,
        ];
        for a in all {
            assert_eq!(
                SHORTCUTS.iter().filter(|s| s.action == a).count(),
                1,
                "{a:?}"
            );
        }
        assert_eq!(SHORTCUTS.len(), all.len());
        for (i, a) in SHORTCUTS.iter().enumerate() {
            for b in &SHORTCUTS[i + 1..] {
                assert_ne!(a.keys, b.keys, "{:?} and {:?}", a.action, b.action);
            }
        }
    }

    #[test]
    fn a_shortcut_never_shadows_a_later_one_with_more_modifiers() {
        // `consume_shortcut` matches logically: extra Shift/Alt are ignored,
        // so the one with more modifiers must be tried first.
        for (i, a) in SHORTCUTS.iter().enumerate() {
            for b in &SHORTCUTS[i + 1..] {
                let shadows = a.keys.logical_key == b.keys.logical_key
                    && !a.keys.modifiers.is_none()
                    && b.keys.modifiers.matches_logically(a.keys.modifiers);
                assert!(!shadows, "{:?} shadows {:?}", a.action, b.action);
            }
        }
    }
}
