"""The ground floor: teams, memberships and roles, the permission checks every app shares, and the
hash-chained audit log with its REST API and page. It imports no other app."""
