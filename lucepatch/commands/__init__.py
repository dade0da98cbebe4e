"""One module per verb: parse → call domain code → report. No domain logic lives here."""
