"""pacific-central: one member of OVN central (NB, SB and ovn-northd) that keeps
itself in its RAFT clusters (issue 29; decision 0046).

    raft.py      cluster/status read into a Status; which servers to kick
    dbfile.py    a member's database file: create, join, or move a corrupt one aside
    member.py    one database's ovsdb-server, supervised, and its housekeeping
    main.py      flags, the members, ovn-northd, health endpoints
"""
