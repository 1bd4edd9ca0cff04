INSERT INTO `g` (`id`, `price`, `qty`, `doc`) VALUES
(1, 1.25, 2, '{"name": "a"}'),
(2, NULL, 3, NULL)
ON DUPLICATE KEY UPDATE `id` = IF(`id` <=> VALUES(`id`), `id`, NULL), `price` = VALUES(`price`), `qty` = VALUES(`qty`), `doc` = VALUES(`doc`);
UPDATE `g` SET `id` = 30, `price` = 10.51, `qty` = 5, `doc` = '{"x": 1}' WHERE `id` = 3;
SELECT IF(ROW_COUNT() = 1, 0, (SELECT 1 UNION ALL SELECT 2)) INTO @sluice_moved
