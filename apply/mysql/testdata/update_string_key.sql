UPDATE `docs` AS t JOIN (SELECT NULL AS `id`, NULL AS `n` FROM DUAL WHERE FALSE
UNION ALL SELECT 'a', 1
UNION ALL SELECT 'it''s', 2) AS u ON t.`id` = CONVERT(u.`id` USING latin1) COLLATE latin1_nopad_bin
SET t.`n` = u.`n`;
SELECT IF((SELECT COUNT(*) FROM `docs` WHERE `id` IN ('a', 'it''s')) = 2, 0, (SELECT 1 UNION ALL SELECT 2)) INTO @sluice_found
