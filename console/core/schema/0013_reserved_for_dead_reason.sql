-- A placeholder on the console-events branch only: migration 0013 is helper 2's dead-reason column
-- (another branch). Migrations must be numbered without gaps, so this branch holds the number with an empty
-- step; the merge replaces this file with the real 0013.
SELECT 1;
