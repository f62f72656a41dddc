"""Analysis: raw step logs → tables (the derivation the aggregate rule, the audit and campaign
regeneration share)."""
