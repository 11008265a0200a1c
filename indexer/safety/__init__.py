"""What an untrusted repository may not do to the process that indexes it: no links followed, no git config run, no code of the tree imported, no helper outliving us."""
