INSERT INTO `order_lines` (`order_id`, `line`, `sku`) VALUES
(1, 1, 'a'),
(1, 2, 'b')
ON DUPLICATE KEY UPDATE `order_id` = IF(`order_id` <=> VALUES(`order_id`) AND `line` <=> VALUES(`line`), `order_id`, NULL), `sku` = VALUES(`sku`)
